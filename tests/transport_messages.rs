//! Messages on an open connection: the 16 MiB limit both ways
//! (PROTOCOL.md §1.4), binary frames handed up as bytes (§1.2), control
//! frames and closing, and the reader/writer split — a writer is never held
//! up for long by a reader waiting for data or by a message trickling in.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod transport_support;

use std::sync::mpsc::{Receiver, Sender};
use std::thread;
use std::time::{Duration, Instant};

use autogpt_shim::transport::{
    CloseInfo, Connector, FRAGMENT_BYTES, Incoming, Keepalive, KeepaliveAction, MAX_MESSAGE_BYTES,
    Payload, ProxyConfig, QUEUED_TEXT_BYTES, Reader, TransportError, Writer,
};
use transport_support::{Answer, PATIENCE, Pki, Server, ServerSocket, drain, report};
use tungstenite::Message;
use tungstenite::protocol::CloseFrame;
use tungstenite::protocol::frame::Frame;
use tungstenite::protocol::frame::coding::{Data, OpCode};

/// The longest a write may wait for the reader's turn in these tests: one
/// reader turn plus one poll interval is about 100 ms; the rest is room for
/// a loaded machine.
const WRITER_BOUND: Duration = Duration::from_millis(400);

/// A TLS connection to a server running `behaviour`.
fn open<F>(behaviour: F) -> (Reader, Writer, Server)
where
    F: FnOnce(&mut ServerSocket) + Send + 'static,
{
    let pki = Pki::new("messages");
    let server = Server::start(Some(pki.server_config()), Answer::Accept, behaviour);
    let connection = Connector::new(Some(&pki.ca_file), &[], ProxyConfig::direct())
        .unwrap()
        .connect(&server.wss_url(), None)
        .unwrap();
    let (reader, writer) = connection.split().unwrap();
    (reader, writer, server)
}

/// The same over loopback `ws://`.
fn open_plain<F>(behaviour: F) -> (Reader, Writer, Server)
where
    F: FnOnce(&mut ServerSocket) + Send + 'static,
{
    let server = Server::start(None, Answer::Accept, behaviour);
    let connection = Connector::new(None, &[], ProxyConfig::direct())
        .unwrap()
        .connect(&server.ws_url(), None)
        .unwrap();
    let (reader, writer) = connection.split().unwrap();
    (reader, writer, server)
}

/// Reads until something other than `Idle` arrives; counts the idle turns.
fn next(reader: &mut Reader) -> (Result<Incoming, TransportError>, usize) {
    let deadline = Instant::now() + PATIENCE;
    let mut idle = 0;
    loop {
        match reader.read() {
            Ok(Incoming::Idle) => {
                idle += 1;
                assert!(Instant::now() < deadline, "nothing arrived");
            }
            other => return (other, idle),
        }
    }
}

fn next_message(reader: &mut Reader) -> Vec<u8> {
    match next(reader).0 {
        Ok(Incoming::Message(bytes)) => bytes.to_vec(),
        other => panic!("expected a message, got {other:?}"),
    }
}

/// Closes from our side and reads to the end.
fn finish(mut reader: Reader, writer: Writer, server: Server) {
    let _ = writer.close(1000, "");
    while next(&mut reader).0.is_ok() {}
    server.join();
}

#[test]
fn a_16_mib_message_is_accepted_inbound() {
    let (mut reader, writer, server) = open(|socket| {
        socket
            .send(Message::text("a".repeat(MAX_MESSAGE_BYTES)))
            .unwrap();
        drain(socket);
    });
    let bytes = next_message(&mut reader);
    assert_eq!(bytes.len(), 16_777_216);
    assert!(bytes.iter().all(|&b| b == b'a'));
    finish(reader, writer, server);
}

#[test]
fn a_16_mib_message_in_two_fragments_is_accepted_inbound() {
    let half = MAX_MESSAGE_BYTES / 2;
    let (mut reader, writer, server) = open(move |socket| {
        let first = Frame::message(vec![b'x'; half], OpCode::Data(Data::Text), false);
        let last = Frame::message(vec![b'y'; half], OpCode::Data(Data::Continue), true);
        socket.send(Message::Frame(first)).unwrap();
        socket.send(Message::Frame(last)).unwrap();
        drain(socket);
    });
    assert_eq!(next_message(&mut reader).len(), MAX_MESSAGE_BYTES);
    finish(reader, writer, server);
}

#[test]
fn a_frame_one_byte_over_16_mib_fails_the_connection() {
    let (mut reader, _writer, _server) = open(|socket| {
        let _ = socket.send(Message::text("b".repeat(MAX_MESSAGE_BYTES + 1)));
    });
    let error = next(&mut reader).0.unwrap_err();
    assert!(
        matches!(error, TransportError::MessageTooLarge { size } if size == MAX_MESSAGE_BYTES + 1),
        "{error:?}"
    );
    assert!(error.is_transient());
    assert_eq!(error.audit_reason(), "loop_error: message_too_large");
}

#[test]
fn a_message_one_byte_over_16_mib_is_closed_with_1009() {
    let (close_seen, close_code) = report();
    let (mut reader, _writer, server) = open(move |socket| {
        let first = Frame::message(
            vec![b'x'; MAX_MESSAGE_BYTES],
            OpCode::Data(Data::Text),
            false,
        );
        let last = Frame::message(vec![b'y'], OpCode::Data(Data::Continue), true);
        socket.send(Message::Frame(first)).unwrap();
        socket.send(Message::Frame(last)).unwrap();
        while let Ok(message) = socket.read() {
            if let Message::Close(frame) = message {
                let _ = close_seen.send(frame.map(|f| u16::from(f.code)));
                break;
            }
        }
    });
    let error = next(&mut reader).0.unwrap_err();
    assert!(
        matches!(error, TransportError::MessageTooLarge { .. }),
        "{error:?}"
    );
    assert_eq!(close_code.recv_timeout(PATIENCE).unwrap(), Some(1009));
    server.join();
}

#[test]
fn a_16_mib_message_can_be_sent() {
    let (lengths, received) = report();
    let (reader, writer, server) = open(move |socket| {
        for message in drain(socket) {
            let _ = lengths.send(message.len());
        }
    });
    writer.send_text("c".repeat(MAX_MESSAGE_BYTES)).unwrap();
    writer.send_text("after".to_owned()).unwrap();
    finish(reader, writer, server);
    assert_eq!(received.recv().unwrap(), MAX_MESSAGE_BYTES);
    assert_eq!(received.recv().unwrap(), 5);
}

#[test]
fn queued_messages_leave_together_with_the_flush_and_in_order() {
    let (texts, received) = report();
    // Each message is reported as it arrives.
    let (reader, writer, server) = open(move |socket| {
        while let Ok(message) = socket.read() {
            if message.is_text() {
                let _ = texts.send(message);
            }
        }
    });
    for n in 0..5 {
        writer.queue_text(format!("q{n}")).unwrap();
    }
    assert!(
        received.recv_timeout(Duration::from_millis(300)).is_err(),
        "a queued message left before the flush"
    );
    writer.flush().unwrap();
    for n in 0..5 {
        assert_eq!(
            received.recv_timeout(PATIENCE).unwrap(),
            Message::text(format!("q{n}"))
        );
    }
    // A larger one is sent at once, and takes what is queued ahead with it.
    writer.queue_text("ahead".to_owned()).unwrap();
    let large = "l".repeat(QUEUED_TEXT_BYTES + 1);
    writer.queue_text(large.clone()).unwrap();
    assert_eq!(
        received.recv_timeout(PATIENCE).unwrap(),
        Message::text("ahead")
    );
    assert!(received.recv_timeout(PATIENCE).unwrap() == Message::text(large));
    finish(reader, writer, server);
}

/// A connection to a platform that refuses any frame longer than
/// `FRAGMENT_BYTES` and reports every message it receives, once the
/// connection ends.
fn open_refusing_long_frames() -> (Reader, Writer, Server, Receiver<Message>) {
    let (texts, received) = report();
    let (reader, writer, server) = open(move |socket| {
        socket.set_config(|config| config.max_frame_size = Some(FRAGMENT_BYTES));
        for message in drain(socket) {
            let _ = texts.send(message);
        }
    });
    (reader, writer, server, received)
}

/// `len` letters, `a` to `z` over and over.
fn letters(len: usize) -> String {
    (0..len)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect()
}

/// A large message leaves in fragments of at most `FRAGMENT_BYTES`, in
/// order: a platform refusing any longer frame still receives it whole.
#[test]
fn a_large_message_is_sent_in_fragments_that_arrive_as_one_message() {
    let (reader, writer, server, received) = open_refusing_long_frames();
    let text = letters(3 * FRAGMENT_BYTES + 5);
    writer.send_text(text.clone()).unwrap();
    writer.send_text("after".to_owned()).unwrap();
    finish(reader, writer, server);
    assert!(
        received.recv().unwrap() == Message::text(text),
        "other text"
    );
    assert_eq!(received.recv().unwrap(), Message::text("after"));
}

/// A message given in pieces arrives as their joined text, however the
/// pieces fall against the fragments, and the 16 MiB cap counts them all.
#[test]
fn a_message_in_pieces_arrives_as_their_joined_text() {
    let (reader, writer, server, received) = open_refusing_long_frames();
    let body = letters(2 * FRAGMENT_BYTES + 7);
    let messages = [
        ["{\"head\":\"".to_owned(), body.clone(), "\"}".to_owned()],
        [String::new(), body.clone(), String::new()],
        [body.clone(), String::new(), "é".to_owned()],
        ["small ".to_owned(), "in ".to_owned(), "pieces".to_owned()],
        [String::new(), String::new(), String::new()],
        // A piece of exactly one fragment, and a character cut by the
        // fragment boundary inside a piece and across two pieces.
        ["f".repeat(FRAGMENT_BYTES), "é".to_owned(), "g".to_owned()],
        [
            "h".repeat(FRAGMENT_BYTES - 1) + "éé",
            body.clone(),
            String::new(),
        ],
        ["i".repeat(FRAGMENT_BYTES - 1), "é".repeat(3), body.clone()],
    ];
    for pieces in messages.clone() {
        writer.send_text_pieces(pieces).unwrap();
    }
    let over = [
        "x".to_owned(),
        "y".repeat(MAX_MESSAGE_BYTES - 1),
        "z".to_owned(),
    ];
    assert!(matches!(
        writer.send_text_pieces(over),
        Err(TransportError::OutboundTooLarge { size }) if size == MAX_MESSAGE_BYTES + 1
    ));
    writer.send_text("after".to_owned()).unwrap();
    finish(reader, writer, server);
    for pieces in messages {
        let joined = pieces.concat();
        assert!(
            received.recv().unwrap() == Message::text(joined.clone()),
            "other text than the {} bytes joined",
            joined.len()
        );
    }
    assert_eq!(received.recv().unwrap(), Message::text("after"));
}

#[test]
fn a_large_send_waits_for_a_platform_that_is_busy_sending() {
    let (lengths, received) = report();
    let (reader, writer, server) = open(move |socket| {
        // Not reading for a second, while sending: the shim's 16 MiB write
        // backs up and its socket has inbound data at the same time.
        for n in 0..50 {
            socket.send(Message::text(format!("status {n}"))).unwrap();
            thread::sleep(Duration::from_millis(20));
        }
        for message in drain(socket) {
            let _ = lengths.send(message.len());
        }
    });
    let (events, seen) = report();
    let reading = spawn_reader(reader, events);
    writer.send_text("e".repeat(MAX_MESSAGE_BYTES)).unwrap();
    writer.close(1000, "").unwrap();
    reading.join().unwrap();
    server.join();
    assert_eq!(received.iter().collect::<Vec<_>>(), [MAX_MESSAGE_BYTES]);
    let messages = seen
        .iter()
        .filter(|event| matches!(event, Ok(Incoming::Message(_))))
        .count();
    assert_eq!(messages, 50);
}

#[test]
fn an_outbound_message_over_16_mib_is_refused_unsent() {
    let (texts, received) = report();
    let (reader, writer, server) = open(move |socket| {
        for message in drain(socket) {
            let _ = texts.send(message.into_text().unwrap().to_string());
        }
    });
    let error = writer
        .send_text("d".repeat(MAX_MESSAGE_BYTES + 1))
        .unwrap_err();
    assert!(
        matches!(error, TransportError::OutboundTooLarge { size } if size == MAX_MESSAGE_BYTES + 1),
        "{error:?}"
    );
    writer.send_text("still usable".to_owned()).unwrap();
    finish(reader, writer, server);
    assert_eq!(received.iter().collect::<Vec<_>>(), ["still usable"]);
}

#[test]
fn a_binary_frame_is_handed_up_as_bytes() {
    let (mut reader, writer, server) = open(|socket| {
        socket
            .send(Message::binary(vec![0xff, 0x00, b'{', b'}']))
            .unwrap();
        socket
            .send(Message::binary(br#"{"type":"PING"}"#.to_vec()))
            .unwrap();
        drain(socket);
    });
    assert_eq!(next_message(&mut reader), [0xff, 0x00, b'{', b'}']);
    assert_eq!(next_message(&mut reader), br#"{"type":"PING"}"#);
    finish(reader, writer, server);
}

/// Server side: splits one text frame across two TCP writes with a pause.
fn split_frame(payload: &'static [u8], pause: Duration) -> impl FnOnce(&mut ServerSocket) + Send {
    move |socket| {
        assert!(payload.len() < 126);
        let mut frame = vec![0x81, payload.len() as u8];
        frame.extend_from_slice(payload);
        socket.get_mut().write_split(&frame, frame.len() / 2, pause);
        drain(socket);
    }
}

#[test]
fn a_frame_split_across_reader_turns_arrives_whole() {
    let payload: &'static [u8] = br#"{"type":"FILE_READ","id":"r1"}"#;
    for plain in [true, false] {
        let behaviour = split_frame(payload, Duration::from_millis(300));
        let (mut reader, writer, server) = if plain {
            open_plain(behaviour)
        } else {
            open(behaviour)
        };
        let (message, idle_turns) = next(&mut reader);
        let text = String::from_utf8(payload.to_vec()).unwrap();
        assert_eq!(message.unwrap(), Incoming::Message(Payload::from(text)));
        assert!(idle_turns >= 2, "plain={plain}: {idle_turns} idle turns");
        finish(reader, writer, server);
    }
}

/// Reads on a thread of its own until the connection ends, forwarding
/// every non-idle result.
fn spawn_reader(
    mut reader: Reader,
    out: Sender<Result<Incoming, String>>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        loop {
            match reader.read() {
                Ok(Incoming::Idle) => {}
                Ok(incoming) => {
                    let _ = out.send(Ok(incoming));
                }
                Err(error) => {
                    let _ = out.send(Err(error.to_string()));
                    return;
                }
            }
        }
    })
}

#[test]
fn a_pong_is_not_delayed_by_a_reader_waiting_for_data() {
    let (arrivals, arrived) = report();
    let (reader, writer, server) = open(move |socket| {
        for message in drain(socket) {
            let _ = arrivals.send(message.into_text().unwrap().to_string());
        }
    });
    let (events, _seen) = report();
    let reading = spawn_reader(reader, events);
    thread::sleep(Duration::from_millis(200));

    let mut slowest = Duration::ZERO;
    for n in 0..20 {
        let started = Instant::now();
        writer
            .send_text(format!(r#"{{"type":"PONG","id":"{n}"}}"#))
            .unwrap();
        slowest = slowest.max(started.elapsed());
        thread::sleep(Duration::from_millis(7));
    }
    assert!(slowest < WRITER_BOUND, "a PONG waited {slowest:?}");
    writer.close(1000, "").unwrap();
    reading.join().unwrap();
    server.join();
    assert_eq!(arrived.iter().count(), 20);
}

#[test]
fn a_text_frame_arrives_as_checked_text_and_a_binary_frame_as_bytes() {
    // The protocol layer skips its UTF-8 check only for what arrives as
    // text, so a binary frame must never be handed up as text.
    let (mut reader, writer, server) = open(|socket: &mut ServerSocket| {
        let mut frames = vec![0x81, 2, b'{', b'}'];
        frames.extend_from_slice(&[0x82, 3, 0xff, b'{', 0x80]);
        let stream = socket.get_mut();
        std::io::Write::write_all(stream, &frames).unwrap();
        std::io::Write::flush(stream).unwrap();
        drain(socket);
    });
    match next(&mut reader).0 {
        Ok(Incoming::Message(Payload::Text(text))) => assert_eq!(text.as_str(), "{}"),
        other => panic!("expected a text payload, got {other:?}"),
    }
    match next(&mut reader).0 {
        Ok(Incoming::Message(payload @ Payload::Binary(_))) => {
            assert_eq!(payload.checked_text(), None);
            assert_eq!(&*payload, &[0xff, b'{', 0x80]);
        }
        other => panic!("expected a binary payload, got {other:?}"),
    }
    finish(reader, writer, server);
}

/// The size of one slice of a message sent by [`trickle_in`].
const TRICKLE_SLICE: usize = 64 * 1024;

/// Sends one text frame of `slices` slices of [`TRICKLE_SLICE`] bytes, with
/// a pause after each: 64 slices (4 MiB) take more than a second to arrive.
fn trickle_in(slices: usize) -> impl FnOnce(&mut ServerSocket) + Send {
    move |socket| {
        let len = (TRICKLE_SLICE * slices) as u64;
        let mut header = vec![0x81, 127];
        header.extend_from_slice(&len.to_be_bytes());
        let stream = socket.get_mut();
        std::io::Write::write_all(stream, &header).unwrap();
        for _ in 0..slices {
            std::io::Write::write_all(stream, &[b'z'; TRICKLE_SLICE]).unwrap();
            std::io::Write::flush(stream).unwrap();
            thread::sleep(Duration::from_millis(20));
        }
        drain(socket);
    }
}

#[test]
fn a_writer_is_not_held_up_while_a_large_message_trickles_in() {
    const CHUNKS: usize = 64;
    let (mut reader, writer, server) = open(trickle_in(CHUNKS));
    let sending = thread::spawn(move || {
        thread::sleep(Duration::from_millis(150));
        let started = Instant::now();
        writer.send_text(r#"{"type":"PONG"}"#.to_owned()).unwrap();
        (started.elapsed(), writer)
    });
    let message = next_message(&mut reader);
    assert_eq!(message.len(), TRICKLE_SLICE * CHUNKS);
    let (took, writer) = sending.join().unwrap();
    assert!(took < WRITER_BOUND, "the PONG waited {took:?}");
    finish(reader, writer, server);
}

#[test]
fn a_large_message_trickling_in_shows_the_connection_alive_before_it_is_whole() {
    const CHUNKS: usize = 32;
    let (mut reader, writer, server) = open(trickle_in(CHUNKS));
    let _ = reader.progressed();
    let deadline = Instant::now() + PATIENCE;
    let mut alive_before_whole = 0;
    let message = loop {
        match reader.read() {
            Ok(Incoming::Idle) => {
                alive_before_whole += usize::from(reader.progressed());
                assert!(Instant::now() < deadline, "nothing arrived");
            }
            Ok(Incoming::Message(bytes)) => break bytes,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(message.len(), TRICKLE_SLICE * CHUNKS);
    assert!(
        alive_before_whole > 5,
        "seen alive {alive_before_whole} times while the message came in"
    );
    finish(reader, writer, server);
}

#[test]
fn a_ping_from_the_platform_is_answered_with_its_payload() {
    let (pongs, pong) = report();
    let (reader, writer, server) = open(move |socket| {
        socket
            .send(Message::Ping(b"are-you-there".to_vec().into()))
            .unwrap();
        loop {
            match socket.read() {
                Ok(Message::Pong(payload)) => {
                    let _ = pongs.send(payload.to_vec());
                    break;
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
        drain(socket);
    });
    let (events, _seen) = report();
    let reading = spawn_reader(reader, events);
    assert_eq!(pong.recv_timeout(PATIENCE).unwrap(), b"are-you-there");
    writer.close(1000, "").unwrap();
    reading.join().unwrap();
    server.join();
}

#[test]
fn a_keepalive_ping_comes_back_as_the_matching_pong() {
    let (mut reader, writer, server) = open(|socket| {
        drain(socket);
    });
    let start = Instant::now();
    let mut keepalive = Keepalive::new(start);
    assert!(matches!(keepalive.poll(start), KeepaliveAction::Wait(_)));
    let KeepaliveAction::Ping(payload) = keepalive.poll(start + Duration::from_secs(20)) else {
        panic!("no ping due");
    };
    writer.ping(&payload).unwrap();
    match next(&mut reader).0.unwrap() {
        Incoming::Pong(bytes) => assert!(keepalive.on_pong(&bytes)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        keepalive.poll(start + Duration::from_secs(35)),
        KeepaliveAction::Wait(_)
    ));
    finish(reader, writer, server);
}

#[test]
fn a_close_from_the_platform_reports_its_code_and_reason() {
    let (mut reader, _writer, server) = open(|socket| {
        socket
            .close(Some(CloseFrame {
                code: 4428.into(),
                reason: "session_revoked".into(),
            }))
            .unwrap();
        drain(socket);
    });
    assert_eq!(
        next(&mut reader).0.unwrap(),
        Incoming::Closed(Some(CloseInfo {
            code: 4428,
            reason: "session_revoked".to_owned()
        }))
    );
    let after = next(&mut reader).0.unwrap_err();
    assert!(matches!(after, TransportError::Closed), "{after:?}");
    server.join();
}

#[test]
fn a_close_from_the_shim_completes_the_closing_handshake() {
    let (codes, code) = report();
    let (mut reader, writer, server) = open(move |socket| {
        loop {
            match socket.read() {
                Ok(Message::Close(frame)) => {
                    let _ = codes.send(frame.map(|f| (u16::from(f.code), f.reason.to_string())));
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    });
    writer.close(1000, "bye").unwrap();
    assert_eq!(
        code.recv_timeout(PATIENCE).unwrap(),
        Some((1000, "bye".to_owned()))
    );
    assert!(matches!(next(&mut reader).0, Ok(Incoming::Closed(_))));
    assert!(matches!(next(&mut reader).0, Err(TransportError::Closed)));
    assert!(matches!(
        writer.send_text("late".to_owned()),
        Err(TransportError::Closed)
    ));
    server.join();
}

#[test]
fn a_keepalive_ping_behind_a_large_send_holds_up_neither_the_reader_nor_the_pong_wait() {
    let (mut reader, writer, server) = open(|socket| {
        // Says something, then takes nothing for two seconds: the shim's
        // 16 MiB write backs up, and the ping queued behind it with it.
        socket.send(Message::text("first")).unwrap();
        thread::sleep(Duration::from_secs(2));
        drain(socket);
    });
    let sending = {
        let writer = writer.clone();
        thread::spawn(move || writer.send_text("e".repeat(MAX_MESSAGE_BYTES)))
    };
    thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    writer.ping(b"behind").unwrap();
    let took = started.elapsed();
    assert!(took < WRITER_BOUND, "queueing the ping took {took:?}");
    assert_eq!(next_message(&mut reader), b"first");
    // Once the platform takes the large message again, the connection is
    // seen alive before the pong comes.
    let deadline = Instant::now() + PATIENCE;
    let mut progressed = false;
    let pong = loop {
        progressed |= reader.progressed();
        match reader.read() {
            Ok(Incoming::Idle) => assert!(Instant::now() < deadline, "no pong"),
            Ok(Incoming::Pong(payload)) => break payload,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(pong, b"behind");
    assert!(
        progressed,
        "the large message moving showed no sign of life"
    );
    sending.join().unwrap().unwrap();
    finish(reader, writer, server);
}
