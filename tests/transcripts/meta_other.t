# md, ma, mn, me.
send: md gone q\r\nmd gone\r\nmd gone k O1\r\nms e 1\r\nx\r\nmd e C1 k O2\r\nmd e k O3 q\r\nmd e k O4\r\nmn\r\n
recv: NF\r\nNF\r\nNF kgone O1\r\nHD\r\nHD ke O2\r\nNF ke O3\r\nNF ke O4\r\nMN\r\n
send: ma cnt\r\nma cnt N0 J10 v\r\nma cnt v\r\nma cnt MD D20 v t\r\nma cnt D5 q\r\nma cnt v M+\r\nms sx 1\r\nx\r\nma sx\r\nma cnt C1 v\r\nmn\r\n
recv: NF\r\nVA 2\r\n10\r\nVA 2\r\n11\r\nVA 1 t-1\r\n0\r\nVA 1\r\n6\r\nHD\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\nEX\r\nMN\r\n
send: ma nope k O1 t v\r\nma nope q\r\nma nope N0 q\r\nma nope q v\r\nmn\r\n
recv: NF knope O1\r\nNF\r\nHD\r\nMN\r\n
send: ma x Dabc\r\nma x Jabc N0\r\nma x MX\r\nmd x Cabc\r\nmd x Tabc I\r\nmd x x\r\nmn\r\n
recv: CLIENT_ERROR invalid or duplicate flag\r\nCLIENT_ERROR invalid or duplicate flag\r\nCLIENT_ERROR invalid mode for ma M token\r\nCLIENT_ERROR invalid or duplicate flag\r\nCLIENT_ERROR invalid or duplicate flag\r\nCLIENT_ERROR invalid or duplicate flag\r\nMN\r\n
send: ms tt 1 T100\r\n5\r\nma tt T50 t v\r\nmg tt t\r\n
recv: HD\r\nVA 1 t50\r\n6\r\nHD t50\r\n
send: mn\r\nmn foo\r\n
recv: MN\r\nMN\r\n
send: me nothing\r\nms dbg 2\r\nhi\r\nme dbg\r\nme\r\nme dbg b\r\n
recv: EN\r\nHD\r\nME dbg exp=-1 la={n} cas={n} fetch=no cls={n} size={n}\r\nCLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n
send: ma lower N0 Mi v\r\nma lower Md v\r\nma lower MI v\r\nmn\r\n
recv: CLIENT_ERROR invalid mode for ma M token\r\nCLIENT_ERROR invalid mode for ma M token\r\nNF\r\nMN\r\n
send: ms lower 1 Ma\r\nx\r\nms lower 1 Me\r\nx\r\nmn\r\n
recv: CLIENT_ERROR invalid mode for ms M token\r\nCLIENT_ERROR invalid mode for ms M token\r\nMN\r\n
