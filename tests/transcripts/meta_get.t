# mg: flags returned in request order, quiet mode, opaque, base64 keys, win/stale.
send: mg miss v\r\nmg miss v q\r\nmg miss v k O123\r\nmg miss k O1 b\r\nmn\r\n
recv: EN\r\nEN kmiss O123\r\nEN kmiss b O1\r\nMN\r\n
send: ms a 2 T90 F5\r\nhi\r\nmg a v t f s k O9 h l\r\nmg a\r\nmg a h l\r\nmg a u h\r\n
recv: HD\r\nVA 2 t90 f5 s2 ka O9 h0 l0\r\nhi\r\nHD\r\nHD h1 l0\r\nHD h1\r\n
send: ms q 1\r\nx\r\nmg q q\r\nmg q q k\r\nmg q q v\r\nmn\r\n
recv: HD\r\nHD\r\nHD kq\r\nVA 1\r\nx\r\nMN\r\n
send: ms bWtleQ== 2 b k\r\nhi\r\nmg bWtleQ== b k v\r\nmg mkey v\r\nmg !!! b v\r\nmg a b\r\n
recv: HD kbWtleQ== b\r\nVA 2 kbWtleQ== b\r\nhi\r\nVA 2\r\nhi\r\nCLIENT_ERROR error decoding key\r\nCLIENT_ERROR error decoding key\r\n
send: mg viv N30 v t\r\nmg viv N30 v t\r\nms viv 1 T60\r\nx\r\nmg viv v\r\n
recv: VA 0 t30 W\r\n\r\nVA 0 t30 Z\r\n\r\nHD\r\nVA 1\r\nx\r\n
send: ms rc 2 T20\r\nhi\r\nmg rc R30 v t\r\nmg rc R30 v t\r\nmg rc R10 v t\r\n
recv: HD\r\nVA 2 t20 W\r\nhi\r\nVA 2 t20 Z\r\nhi\r\nVA 2 t20 Z\r\nhi\r\n
send: ms t 1 T100\r\nx\r\nmg t T5 t v\r\nmg t t\r\n
recv: HD\r\nVA 1 t5\r\nx\r\nHD t5\r\n
send: ms p 1\r\nx\r\nmg p P L v\r\nmg p Pfoo Lbar v\r\n
recv: HD\r\nVA 1\r\nx\r\nVA 1\r\nx\r\n
send: mg a zz\r\nmg a v v\r\nmg\r\nmg a Nabc\r\nmg a Rabc\r\nmg a Tabc\r\nmg a T\r\nmg a E5 v\r\nmn\r\n
recv: CLIENT_ERROR invalid flag\r\nCLIENT_ERROR duplicate flag\r\nERROR\r\nCLIENT_ERROR bad token in command line format\r\nCLIENT_ERROR bad token in command line format\r\nCLIENT_ERROR bad token in command line format\r\nCLIENT_ERROR bad token in command line format\r\nCLIENT_ERROR invalid flag\r\nMN\r\n
send: mg a Oaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa v\r\nmn\r\n
recv: CLIENT_ERROR opaque token too long\r\nMN\r\n
# Only a meta get wins a stale item's recache token: get, gets, gat, gats and touch leave it.
send: ms st 1\r\nx\r\nmd st I\r\nget st\r\ngets st\r\ngat 100 st\r\ngats 100 st\r\ntouch st 100\r\nmg st\r\nmg st\r\n
recv: HD\r\nHD\r\nVALUE st 0 1\r\nx\r\nEND\r\nVALUE st 0 1 {n}\r\nx\r\nEND\r\nVALUE st 0 1\r\nx\r\nEND\r\nVALUE st 0 1 {n}\r\nx\r\nEND\r\nTOUCHED\r\nHD X W\r\nHD Z X\r\n
# R is an exptime: over 30 days a Unix time (far in the future: wins; past: never); negative or 0: never.
send: ms ra 1 T100000\r\nx\r\nmg ra R1000000000\r\nmg ra R-1\r\nmg ra R0\r\nmg ra R2000000000\r\nmg ra R2000000000\r\n
recv: HD\r\nHD\r\nHD\r\nHD\r\nHD W\r\nHD Z\r\n
