<?php
header('Content-Type: text/plain');
echo "ok ", ini_get('session.save_handler'), ' ', ini_get('session.save_path'), "\n";
