"""What to change: the advice table findings point into (SPEC section 5).

Each entry says which side must change, the fix, its trade-offs, and the one-line call in C,
Python, Go, Java, Node.js, .NET and Rust. Findings carry keys into this table; reporters show
the entries, they never decide which fix applies.
"""

from __future__ import annotations

from dataclasses import dataclass

# The documents the advice cites, by title and author (docs/user-guide.md, "Sources").
CHESHIRE = ('Stuart Cheshire, "TCP Performance problems caused by interaction between Nagle\'s '
            'Algorithm and Delayed ACK"')
MINSHALL_ET_AL = ('Minshall, Saito, Mogul and Verghese, "Application performance pitfalls and '
                  'TCP\'s Nagle algorithm"')
SUN_SMALL_PACKETS = 'Sun\'s Solaris study "Small Packet TCP Traffic Performance"'


@dataclass(frozen=True)
class Advice:
    key: str
    side: str
    title: str
    why: str
    tradeoffs: str
    calls: dict[str, str]


NODELAY_CALLS = {
    "C": "int one = 1; setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);",
    "Python": "sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)",
    "Go": "conn.(*net.TCPConn).SetNoDelay(true) // already Go's default",
    "Java": "socket.setTcpNoDelay(true);",
    "Node.js": "socket.setNoDelay(true);",
    ".NET": "socket.NoDelay = true;",
    "Rust": "stream.set_nodelay(true)?;",
}

ADVICE: dict[str, Advice] = {advice.key: advice for advice in (
    Advice(
        key="single-write-nodelay", side="sender",
        title="Write each message whole, then set TCP_NODELAY",
        why="Nagle holds a small segment while earlier data is unacknowledged; with the message "
            "in one write there is nothing left to hold, and TCP_NODELAY stops the hold anyway.",
        tradeoffs="TCP_NODELAY alone, with many small writes, sends one packet per write "
                  "(tinygram flood): make the writes whole first.",
        calls=NODELAY_CALLS),
    Advice(
        key="writev", side="sender",
        title="One write per message (writev / sendmsg / a gathering write)",
        why="Header and body in separate writes make the second one a small segment that Nagle "
            "holds until the peer's delayed ACK; a single gathered write sends them together.",
        tradeoffs="Needs the whole message at hand before writing; no extra packets, no socket "
                  "option to manage.",
        calls={
            "C": "struct iovec iov[2] = {{hdr, hdr_len}, {body, body_len}}; writev(fd, iov, 2);",
            "Python": "sock.sendmsg([header, body])",
            "Go": "net.Buffers{header, body}.WriteTo(conn)",
            "Java": "channel.write(new ByteBuffer[] {header, body}); // GatheringByteChannel",
            "Node.js": "socket.write(Buffer.concat([header, body]));",
            ".NET": "socket.Send(new List<ArraySegment<byte>> { header, body });",
            "Rust": "stream.write_vectored(&[IoSlice::new(&header), IoSlice::new(&body)])?;",
        }),
    Advice(
        key="cork", side="sender",
        title="Cork the socket around a multi-part message (TCP_CORK on Linux, TCP_NOPUSH on "
              "BSD/macOS)",
        why="While corked the kernel only sends full segments; uncorking flushes the rest at "
            "once, so a message built by several libraries still leaves as few packets.",
        tradeoffs="Forgetting to uncork delays data up to 200 ms; Linux and BSD only.",
        calls={
            "C": "setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one); /* writes */ "
                 "setsockopt(fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero);",
            "Python": "sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)  # ... then 0",
            "Go": "raw.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), "
                  "syscall.IPPROTO_TCP, syscall.TCP_CORK, 1) }) // or net.Buffers",
            "Java": "no TCP_CORK API: build the message in one ByteBuffer or use a gathering write",
            "Node.js": "socket.cork(); socket.write(a); socket.write(b); socket.uncork();",
            ".NET": "socket.SetRawSocketOption(6 /* IPPROTO_TCP */, 3 /* TCP_CORK */, "
                    "BitConverter.GetBytes(1)); // Linux",
            "Rust": "socket2::SockRef::from(&stream).set_cork(true)?; // Linux",
        }),
    Advice(
        key="quickack", side="receiver",
        title="Acknowledge at once on the receiver (TCP_QUICKACK after each read on Linux; "
              "TcpAckFrequency=1 on Windows)",
        why="The stall ends when the receiver's delayed-ACK timer fires; acknowledging at once "
            "releases the held segment one round trip later.",
        tradeoffs="More pure ACKs on the network; Linux clears TCP_QUICKACK by itself, so set it "
                  "after every read. Prefer fixing the sender, as "
                  f"{SUN_SMALL_PACKETS} advises.",
        calls={
            "C": "setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one); /* after each recv */",
            "Python": "sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)  # after each recv",
            "Go": "raw.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), "
                  "syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1) })",
            "Java": "socket.setOption(jdk.net.ExtendedSocketOptions.TCP_QUICKACK, true); // Linux",
            "Node.js": "no API: fix the sender instead",
            ".NET": "socket.SetRawSocketOption(6, 12 /* TCP_QUICKACK */, BitConverter.GetBytes(1)); "
                    "// Linux; Windows: registry TcpAckFrequency=1",
            "Rust": "socket2::SockRef::from(&stream).set_quickack(true)?; // Linux",
        }),
    Advice(
        key="double-buffer", side="application",
        title="Double-buffer: send request n+1 before waiting for the answer to request n",
        why="With something always in the pipe behind the segment being waited for, no lone "
            "segment waits for a delayed ACK, and losses are repaired by fast retransmit "
            f"({CHESHIRE}).",
        tradeoffs="The protocol must allow two outstanding messages; almost all of the gain "
                  "comes from the second buffer.",
        calls={
            "C": "send(fd, req[n + 1], len, 0); /* before */ recv(fd, resp[n], len, 0);",
            "Python": "sock.sendall(next_request)  # before reading the current response",
            "Go": "go writer(requests) // pipeline writes in their own goroutine",
            "Java": "out.write(nextRequest); in.read(currentResponse);",
            "Node.js": "socket.write(next); // before awaiting the current response",
            ".NET": "await stream.WriteAsync(next); await stream.ReadAsync(current);",
            "Rust": "stream.write_all(&next)?; stream.read_exact(&mut current)?;",
        }),
    Advice(
        key="resize-message", side="application",
        title="Resize fixed-size messages to a whole number of full segments, or an odd count",
        why="A receiver that ACKs every second segment leaves the last of an odd run of full "
            "segments unacknowledged; a partial tail behind it waits for the delayed ACK "
            f"({CHESHIRE}: 100,000-byte blocks stall, 99,912-byte ones do not).",
        tradeoffs="Depends on the MSS of the path (1448 with timestamps, 1460 without); fragile.",
        calls={lang: "size the message as in this finding's segment arithmetic" for lang in
               ("C", "Python", "Go", "Java", "Node.js", ".NET", "Rust")}),
    Advice(
        key="buffer-writes", side="sender",
        title="Buffer small writes into whole messages (a buffered writer)",
        why="Each write with Nagle off becomes a packet: a message sent as many small writes "
            f"becomes a flood of tinygrams ({MINSHALL_ET_AL}: an NNTP server sent 147,339 "
            "packets instead of 9,600).",
        tradeoffs="Remember to flush at message boundaries.",
        calls={
            "C": "setvbuf(stream, NULL, _IOFBF, 65536); /* or assemble in a buffer, one send */",
            "Python": "writer = sock.makefile('wb', buffering=65536); writer.write(...); writer.flush()",
            "Go": "w := bufio.NewWriter(conn); w.Write(part); w.Flush()",
            "Java": "new BufferedOutputStream(socket.getOutputStream(), 65536)",
            "Node.js": "socket.cork(); /* writes */ socket.uncork();",
            ".NET": "new BufferedStream(networkStream, 65536)",
            "Rust": "let mut w = BufWriter::new(stream); w.write_all(part)?; w.flush()?;",
        }),
    Advice(
        key="nodelay-stream", side="sender",
        title="For a one-way stream of small messages, disable Nagle in the sender",
        why="Under Nagle and delayed ACK the stream goes out as one small packet, then one large "
            "accumulated packet per ACK cycle, which caps the message rate "
            f"({SUN_SMALL_PACKETS}).",
        tradeoffs="More packets; prefer this over disabling delayed ACK in the receiver, as "
                  f"{SUN_SMALL_PACKETS} advises.",
        calls=NODELAY_CALLS),
)}

NO_NAGLE_FIX: dict[str, str] = {}
"""The calls of the entries for delays that are not Nagle's: no socket call fixes them."""

LOOK_ELSEWHERE = (
    Advice(
        key="look-loss", side="network",
        title="Not Nagle: packets were lost; look at the path and the sender's retransmissions",
        why="The wait ends in a retransmission: after a retransmission timeout (doubling at each "
            "try), after duplicate ACKs, or spuriously when the original had arrived. "
            "TCP_NODELAY changes none of it.",
        tradeoffs="Look for drops on the path (interface counters, queue limits, a lossy link) "
                  "and at the sender's counters (`nstat -az TcpExtTCPLostRetransmit "
                  "TcpRetransSegs`, `ss -ti`: rto, retrans); spurious retransmissions point to "
                  "a round trip that varies more than the timer allows.",
        calls=NO_NAGLE_FIX),
    Advice(
        key="look-receiver", side="receiver",
        title="Not Nagle: the receiver's window held the sender back; look at the receiving "
              "application and its buffer",
        why="A zero or small advertised window means the receiving application read slowly "
            "(or its receive buffer is small): the sender had data and was not allowed to send.",
        tradeoffs="Read faster or on a thread of its own, or raise the receive buffer "
                  "(SO_RCVBUF, net.ipv4.tcp_rmem); a window below one segment is a receiver "
                  "fault (silly window syndrome avoidance, RFC 1122 4.2.3.3).",
        calls=NO_NAGLE_FIX),
    Advice(
        key="look-handshake", side="network",
        title="Not Nagle: the handshake was retried or never answered; look at the server's "
              "reachability and its listen queue",
        why="A SYN retransmitted after 1, 2, 4... seconds, or never answered: the server was "
            "down or unreachable, a firewall dropped the SYN, or its accept queue was full.",
        tradeoffs="Check that the server listens (`ss -ltn`), its SYN backlog "
                  "(net.ipv4.tcp_max_syn_backlog, `nstat -az TcpExtListenOverflows`) and any "
                  "firewall or load balancer on the path.",
        calls=NO_NAGLE_FIX),
    Advice(
        key="look-application", side="application",
        title="Not Nagle: an application took that long to send; look at its processing time",
        why="The network had delivered everything: the peer's data ended the wait because its "
            "application answered (or started) late.",
        tradeoffs="Profile the server's handling of the request (or the client's pause before "
                  "its first request); TCP settings will not shorten it.",
        calls=NO_NAGLE_FIX),
)
ADVICE.update((advice.key, advice) for advice in LOOK_ELSEWHERE)
