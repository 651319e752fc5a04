# delete (with memcached's legacy hold time of 0) and flush_all.
send: set a 0 0 1\r\nx\r\ndelete a\r\ndelete a\r\nget a\r\n
recv: STORED\r\nDELETED\r\nNOT_FOUND\r\nEND\r\n
send: set b 0 0 1\r\nx\r\ndelete b 0\r\ndelete b 0 noreply\r\ndelete b 5\r\ndelete b noreply\r\nmn\r\n
recv: STORED\r\nDELETED\r\nCLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\nMN\r\n
send: delete\r\ndelete a b c d\r\n
recv: ERROR\r\nERROR\r\n
send: set c 0 0 1\r\nx\r\nflush_all\r\nget c\r\nset c 0 0 1\r\ny\r\nget c\r\n
recv: STORED\r\nOK\r\nEND\r\nSTORED\r\nVALUE c 0 1\r\ny\r\nEND\r\n
send: flush_all 0\r\nflush_all noreply\r\nflush_all abc\r\nflush_all 0 noreply\r\nmn\r\n
recv: OK\r\nCLIENT_ERROR invalid exptime argument\r\nMN\r\n
