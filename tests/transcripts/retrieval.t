# Retrieval: get, gets, gat, gats, touch, multi-get, misses.
send: get nothing\r\n
recv: END\r\n
send: set a 7 0 1\r\nx\r\nset b 8 0 2\r\nyy\r\nget a nothing b\r\n
recv: STORED\r\nSTORED\r\nVALUE a 7 1\r\nx\r\nVALUE b 8 2\r\nyy\r\nEND\r\n
send: set c 0 0 1\r\nx\r\ngets c nothing\r\n
recv: STORED\r\nVALUE c 0 1 {n}\r\nx\r\nEND\r\n
send: set d 0 100 1\r\nx\r\ngat 0 d nothing\r\ngats 0 d\r\ntouch d 10\r\ntouch nothing 10\r\n
recv: STORED\r\nVALUE d 0 1\r\nx\r\nEND\r\nVALUE d 0 1 {n}\r\nx\r\nEND\r\nTOUCHED\r\nNOT_FOUND\r\n
send: set e 0 0 1\r\nx\r\ngat -1 e\r\nget e\r\n
recv: STORED\r\nVALUE e 0 1\r\nx\r\nEND\r\nEND\r\n
send: gat 10\r\n
recv: END\r\n
send: get   spaced    keys  \r\n
recv: END\r\n
