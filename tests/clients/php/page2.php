<?php
// Read phase: read the session named by the PHPSESSID cookie and print
// "OK <session id> <sha1 of stored data> <stored checksum>", or
// "MISSING <session id>" if the session has no data.
declare(strict_types=1);
header('Content-Type: text/plain');
if (!session_start()) {
    http_response_code(500);
    echo "ERROR session_start failed\n";
    exit;
}
$id = session_id();
if (!isset($_SESSION['data']) || !is_string($_SESSION['data'])) {
    session_write_close();
    echo "MISSING ", $id, "\n";
    exit;
}
$computed = sha1($_SESSION['data']);
$stored = (string)($_SESSION['sum'] ?? '');
// Unchanged session + session.lazy_write=On: php-memcached only "touches" it.
if (!session_write_close()) {
    http_response_code(500);
    echo "ERROR session_write_close failed\n";
    exit;
}
echo "OK ", $id, ' ', $computed, ' ', $stored, "\n";
