# Storage commands: set, add, replace, append, prepend, cas; flags; noreply.
send: set a 0 0 5\r\nhello\r\nget a\r\n
recv: STORED\r\nVALUE a 0 5\r\nhello\r\nEND\r\n
send: set flags 4294967295 0 1\r\nx\r\nget flags\r\nset flags 4294967296 0 1\r\nx\r\nget flags\r\n
recv: STORED\r\nVALUE flags 4294967295 1\r\nx\r\nEND\r\nSTORED\r\nVALUE flags 0 1\r\nx\r\nEND\r\n
send: add b 0 0 1\r\n1\r\nadd b 0 0 1\r\n2\r\nget b\r\n
recv: STORED\r\nNOT_STORED\r\nVALUE b 0 1\r\n1\r\nEND\r\n
send: replace c 0 0 1\r\n1\r\nset c 0 0 1\r\n1\r\nreplace c 3 0 1\r\n2\r\nget c\r\n
recv: NOT_STORED\r\nSTORED\r\nSTORED\r\nVALUE c 3 1\r\n2\r\nEND\r\n
send: append d 0 0 1\r\nx\r\nset d 1 0 3\r\nmid\r\nappend d 5 5 1\r\n>\r\nprepend d 0 0 1\r\n<\r\nget d\r\n
recv: NOT_STORED\r\nSTORED\r\nSTORED\r\nSTORED\r\nVALUE d 1 5\r\n<mid>\r\nEND\r\n
send: set e 0 0 1\r\n1\r\ngets e\r\n
recv: STORED\r\nVALUE e 0 1 {n}\r\n1\r\nEND\r\n
send: cas nocas 0 0 1 1\r\nx\r\nset f 0 0 1\r\n1\r\ncas f 0 0 1 999999\r\n2\r\nget f\r\n
recv: NOT_FOUND\r\nSTORED\r\nEXISTS\r\nVALUE f 0 1\r\n1\r\nEND\r\n
send: set n 0 0 1 noreply\r\n1\r\nadd n 0 0 1 noreply\r\n2\r\nappend n 0 0 1 noreply\r\n3\r\nget n\r\n
recv: VALUE n 0 2\r\n13\r\nEND\r\n
send: set empty 0 0 0\r\n\r\nget empty\r\n
recv: STORED\r\nVALUE empty 0 0\r\n\r\nEND\r\n
send: set bin 0 0 4\r\n\r\n\r\n\r\nget bin\r\n
recv: STORED\r\nVALUE bin 0 4\r\n\r\n\r\n\r\nEND\r\n
send: set ttl 0 -1 1\r\nx\r\nget ttl\r\nset past 0 9999999999 1\r\nx\r\nget past\r\nset long 0 2592000 1\r\nx\r\nget long\r\n
recv: STORED\r\nEND\r\nSTORED\r\nEND\r\nSTORED\r\nVALUE long 0 1\r\nx\r\nEND\r\n
send: set bare 0 0 1\nx\r\nget bare\nmn\n
recv: STORED\r\nVALUE bare 0 1\r\nx\r\nEND\r\nMN\r\n
send: set k\x01y 0 0 1\r\nx\r\nget k\x01y\r\n
recv: STORED\r\nVALUE k\x01y 0 1\r\nx\r\nEND\r\n
send: set pipe1 0 0 1\r\n1\r\nset pipe2 0 0 1\r\n2\r\nset pipe3 0 0 1\r\n3\r\nget pipe1 pipe2 pipe3 pipe1\r\n
recv: STORED\r\nSTORED\r\nSTORED\r\nVALUE pipe1 0 1\r\n1\r\nVALUE pipe2 0 1\r\n2\r\nVALUE pipe3 0 1\r\n3\r\nVALUE pipe1 0 1\r\n1\r\nEND\r\n
