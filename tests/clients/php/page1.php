<?php
// Write phase: start a new session, store ~1 KB of random data + its checksum.
// Prints "<session id> <sha1 of data>".
declare(strict_types=1);
header('Content-Type: text/plain');
if (!session_start()) {
    http_response_code(500);
    echo "ERROR session_start failed\n";
    exit;
}
$data = bin2hex(random_bytes(512));          // 1024 bytes of hex
$_SESSION['data'] = $data;
$_SESSION['sum'] = sha1($data);
$_SESSION['created'] = microtime(true);
$_SESSION['counter'] = ($_SESSION['counter'] ?? 0) + 1;
$id = session_id();
$sum = $_SESSION['sum'];
if (!session_write_close()) {               // flush to the kv server now
    http_response_code(500);
    echo "ERROR session_write_close failed\n";
    exit;
}
echo $id, ' ', $sum, "\n";
