# incr/decr: 64-bit unsigned, wrap on incr, floor at 0 on decr, padding.
send: incr missing 1\r\ndecr missing 1\r\n
recv: NOT_FOUND\r\nNOT_FOUND\r\n
send: set n 0 0 2\r\n10\r\nincr n 5\r\ndecr n 100\r\nget n\r\n
recv: STORED\r\n15\r\n0\r\nVALUE n 0 2\r\n0 \r\nEND\r\n
send: set w 0 0 20\r\n18446744073709551615\r\nincr w 2\r\nget w\r\n
recv: STORED\r\n1\r\nVALUE w 0 20\r\n1                   \r\nEND\r\n
send: set p 0 0 3\r\n100\r\ndecr p 1\r\nget p\r\nincr p 1\r\nget p\r\n
recv: STORED\r\n99\r\nVALUE p 0 3\r\n99 \r\nEND\r\n100\r\nVALUE p 0 3\r\n100\r\nEND\r\n
send: set s 0 0 2\r\nab\r\nincr s 1\r\nset sp 0 0 3\r\n 12\r\nincr sp 1\r\nset big 0 0 21\r\n111111111111111111111\r\nincr big 1\r\n
recv: STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\nSTORED\r\n13\r\nSTORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n
send: set d 0 0 1\r\n5\r\nincr d abc\r\nincr d -1\r\nincr d 18446744073709551616\r\nincr d 1 noreply\r\nget d\r\n
recv: STORED\r\nCLIENT_ERROR invalid numeric delta argument\r\nCLIENT_ERROR invalid numeric delta argument\r\nCLIENT_ERROR invalid numeric delta argument\r\nVALUE d 0 1\r\n6\r\nEND\r\n
send: set f 3 0 1\r\n1\r\nincr f 9\r\ngets f\r\n
recv: STORED\r\n10\r\nVALUE f 3 2 {n}\r\n10\r\nEND\r\n
