# `lru tune|mode|temp_ttl`: memcached's checks. kura's differences (no
# segments, a temporary TTL fixed at start) are in docs/COMPATIBILITY.md.
send: lru tune 10 25 0.1 2.0\r\n
recv: OK\r\n
send: lru tune 50 50 0.1 2.0\r\n
recv: ERROR hot and warm pcts must not exceed 80\r\n
send: lru tune 10 25 0 2.0\r\n
recv: ERROR hot/warm age factors must be greater than 0\r\n
send: lru tune 10 25 abc 2.0\r\n
recv: ERROR\r\n
send: lru tune 10 25\r\n
recv: ERROR\r\n
send: lru mode flat\r\n
recv: OK\r\n
send: lru mode sideways\r\n
recv: ERROR\r\n
send: lru temp_ttl abc\r\n
recv: ERROR\r\n
send: lru\r\n
recv: ERROR\r\n
send: lru foo\r\n
recv: ERROR\r\n
send: lru mode flat noreply\r\nmn\r\n
recv: MN\r\n
send: lru tune 10 25 0.1 2.0\r\nlru mode flat\r\n
recv: OK\r\nOK\r\n
