# Administrative commands.
send: version\r\n
recv: VERSION 1.6.18\r\n
send: verbosity 1\r\nverbosity 1 noreply\r\nverbosity 0\r\n
recv: OK\r\nOK\r\n
send: shutdown\r\n
recv: ERROR: shutdown not enabled\r\n
send: cache_memlimit\r\ncache_memlimit 4\r\ncache_memlimit 100\r\ncache_memlimit abc\r\ncache_memlimit 64 noreply\r\nmn\r\n
recv: ERROR\r\nMEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\nOK\r\nERROR\r\nMN\r\n
send: stats nonsense\r\nstats detail\r\nstats extstore\r\n
recv: ERROR\r\nCLIENT_ERROR usage: stats detail on|off|dump\r\nEND\r\n
send: stats reset\r\n
recv: RESET\r\n
send: quit\r\nget never\r\n
recv: 
closed: yes
send: verbosity noreply\r\nverbosity 1 2\r\nverbosity 1 noreply\r\nversion\r\n
recv: OK\r\nVERSION 1.6.18\r\n
