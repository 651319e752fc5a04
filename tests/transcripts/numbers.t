# Numbers as memcached reads them (strtoull and friends): a blank after the
# digits ends the number (memcached splits lines at spaces only, so a tab or
# a second \r stays in the token), leading zeros are taken, and -0 is 0.
send: set tab 0 0 3\t\r\nbar\r\nget tab\r\n
recv: STORED\r\nVALUE tab 0 3\r\nbar\r\nEND\r\n
send: set tabbed 0 0\t 3\r\nbar\r\nget tabbed\r\n
recv: STORED\r\nVALUE tabbed 0 3\r\nbar\r\nEND\r\n
send: set cr 0 0 1\r\n5\r\nincr cr 1\r\r\n
recv: STORED\r\n6\r\n
send: set zeros 0 0 1\r\n5\r\nincr zeros 000000000000000000000001\r\n
recv: STORED\r\n6\r\n
send: set minus -0 0 3\r\nabc\r\nget minus\r\n
recv: STORED\r\nVALUE minus 0 3\r\nabc\r\nEND\r\n
send: set casminus 0 0 3\r\nabc\r\ncas casminus 0 0 3 -0\r\nxyz\r\n
recv: STORED\r\nEXISTS\r\n
send: set junk 0 0 3\r\nabc\r\ntouch junk 100\tjunk\r\n
recv: STORED\r\nTOUCHED\r\n
send: ms meta 3 T0000000000000000000000000100\r\nbar\r\nmg meta v\r\n
recv: HD\r\nVA 3\r\nbar\r\n
send: set negative 0 0 3\r\nabc\r\nincr negative -1\r\n
recv: STORED\r\nCLIENT_ERROR invalid numeric delta argument\r\n
send: set neglen 0 0 -0\r\n\r\nget neglen\r\n
recv: STORED\r\nVALUE neglen 0 0\r\n\r\nEND\r\n
