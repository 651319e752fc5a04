# Bad input: memcached's answers, and the stream stays in sync.
send: foo\r\n
recv: ERROR\r\n
send: \r\n
recv: ERROR\r\n
send: GET a\r\n
recv: ERROR\r\n
send: \x00\x01\x02\x03garbage\r\n
recv: ERROR\r\n
send: get\r\n
recv: ERROR\r\n
send: set a 0 0 3\r\nabcd\r\nget a\r\n
recv: CLIENT_ERROR bad data chunk\r\nERROR\r\nEND\r\n
send: set a 0 0 3\r\nab\r\n\r\n
recv: CLIENT_ERROR bad data chunk\r\nERROR\r\n
send: set a 0 0 3 noreply\r\nabcd\r\nmn\r\n
recv: ERROR\r\nMN\r\n
send: set a 0 0 -1\r\nget a\r\n
recv: CLIENT_ERROR bad command line format\r\nEND\r\n
send: set a 0 0 abc\r\nget a\r\n
recv: CLIENT_ERROR bad command line format\r\nEND\r\n
send: set a abc 0 3\r\nabc\r\n
recv: CLIENT_ERROR bad command line format\r\nERROR\r\n
send: set a -1 0 1\r\nx\r\n
recv: CLIENT_ERROR bad command line format\r\nERROR\r\n
send: set a 0 abc 1\r\nx\r\n
recv: CLIENT_ERROR bad command line format\r\nERROR\r\n
send: set a 0 0 99999999999999999999\r\nmn\r\n
recv: CLIENT_ERROR bad command line format\r\nMN\r\n
send: set a 0 0 1 noreply extra\r\nx\r\n
recv: ERROR\r\nERROR\r\n
send: set a 0 0\r\nx\r\n
recv: ERROR\r\nERROR\r\n
send: cas a 0 0 1\r\nx\r\n
recv: ERROR\r\nERROR\r\n
send: cas a 0 0 1 abc\r\nx\r\n
recv: CLIENT_ERROR bad command line format\r\nERROR\r\n
send: set kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk 0 0 1\r\nx\r\nmn\r\n
recv: STORED\r\nMN\r\n
send: get kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk\r\nmn\r\n
recv: END\r\nMN\r\n
send: touch a abc\r\ngat abc a\r\ngat\r\n
recv: CLIENT_ERROR invalid exptime argument\r\nCLIENT_ERROR invalid exptime argument\r\nERROR\r\n
send: incr\r\nincr a\r\ndecr a 1 2 3\r\ntouch a\r\n
recv: ERROR\r\nERROR\r\nERROR\r\nERROR\r\n
send: verbosity\r\nversion extra\r\nquit now\r\n
recv: ERROR\r\nVERSION 1.6.18\r\n
closed: yes
