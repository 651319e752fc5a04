# ms: modes, CAS, invalidation, flags, errors (and when the data is swallowed).
send: ms a 2 c k O1 q\r\nhi\r\nms a 2 MX\r\nhi\r\nms a 2 ME\r\nhi\r\nms a S2\r\nhi\r\nms a\r\nhi\r\nmn\r\n
recv: CLIENT_ERROR invalid mode for ms M token\r\nNS\r\nCLIENT_ERROR bad command line format\r\nERROR\r\nCLIENT_ERROR bad command line format\r\nERROR\r\nMN\r\n
send: ms e 1 ME k O5\r\nx\r\nms e 1 ME k O5\r\nx\r\nms e 1 C1 k O6 b\r\nx\r\nms zz 1 MR k O7\r\nx\r\nms zz 1 C5 k O8\r\nx\r\nmn\r\n
recv: HD ke O5\r\nNS ke O5\r\nCLIENT_ERROR error decoding key\r\nNS kzz O7\r\nNF kzz O8\r\nMN\r\n
send: ms ap 2 MA\r\nhi\r\nms ap 1\r\nx\r\nms ap 1 MA\r\ny\r\nms ap 1 MP\r\nz\r\nmg ap v\r\nms ap 1 Ms\r\nq\r\nmg ap v\r\n
recv: NS\r\nHD\r\nHD\r\nHD\r\nVA 3\r\nzxy\r\nCLIENT_ERROR invalid mode for ms M token\r\nVA 3\r\nzxy\r\n
send: ms st 2 T100\r\nhi\r\nmd st I T30\r\nmg st v t\r\nmg st v t\r\nms st 3 C1\r\nnew\r\nmg st\r\n
recv: HD\r\nHD\r\nVA 2 t30 X W\r\nhi\r\nVA 2 t30 Z X\r\nhi\r\nEX\r\nHD Z X\r\n
send: ms iv 2 T0 I\r\nhi\r\nmd iv I\r\nms iv 3 C1 I\r\nnew\r\nmg iv v\r\n
recv: HD\r\nHD\r\nHD\r\nVA 3 X W\r\nnew\r\n
send: ms x 2 T-1\r\nhi\r\nmg x v\r\nms x 2 F-1\r\nhi\r\nms x 2 Fabc\r\nhi\r\nms x 2 Tabc\r\nhi\r\nms x 1 T\r\nx\r\nms x -1\r\nx\r\nmn\r\n
recv: HD\r\nEN\r\nCLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad token in command line format\r\nCLIENT_ERROR bad token in command line format\r\nCLIENT_ERROR bad command line format\r\nERROR\r\nMN\r\n
send: ms n 1 q\r\nx\r\nms n 1 ME q\r\nx\r\nmn\r\n
recv: NS\r\nMN\r\n
send: ms kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk 1\r\nx\r\nmn\r\n
recv: HD\r\nMN\r\n
send: ms f 2 F77\r\nhi\r\nmg f f v\r\nget f\r\n
recv: HD\r\nVA 2 f77\r\nhi\r\nVALUE f 77 2\r\nhi\r\nEND\r\n
