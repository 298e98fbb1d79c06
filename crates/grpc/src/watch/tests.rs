//! [`Watched`] between a raw client byte stream and a stand-in for hyper, on paused time.

use std::future::poll_fn;
use std::net::{Ipv4Addr, SocketAddr};

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;
use tokio::time::timeout;

use super::*;
use crate::frames::{ping_frame, PREFACE};

/// The test's socket has no idle timer of its own.
impl IdleExpiry for DuplexStream {
    fn idle_expired(&self) -> bool {
        false
    }
}

fn peer() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 1))
}

fn header(length: u32, kind: u8, flags: u8, stream_id: u32) -> Vec<u8> {
    let mut h = length.to_be_bytes()[1..].to_vec();
    h.extend([kind, flags]);
    h.extend(stream_id.to_be_bytes());
    h
}

fn data_frame(stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = header(payload.len() as u32, frames::DATA, 0, stream_id);
    f.extend(payload);
    f
}

/// The server side: what it read (an empty piece is the end of stream), and a way to
/// make it write, as hyper would from its connection task.
struct Hyper {
    read: mpsc::UnboundedReceiver<Vec<u8>>,
    write: mpsc::UnboundedSender<Vec<u8>>,
}

impl Hyper {
    fn start(policy: Http2Policy, calls: Arc<CallCount>, read_size: usize) -> (Self, DuplexStream) {
        let (client, server) = tokio::io::duplex(1 << 16);
        let mut watched = Watched::new(server, peer(), &policy, calls);
        let (read_tx, read) = mpsc::unbounded_channel();
        let (write, mut write_rx) = mpsc::unbounded_channel::<Vec<u8>>();
        tokio::spawn(async move {
            let mut buf = vec![0u8; read_size];
            loop {
                enum Step {
                    Write(Option<Vec<u8>>),
                    Read(io::Result<Vec<u8>>),
                }
                let step = poll_fn(|cx| {
                    if let Poll::Ready(bytes) = write_rx.poll_recv(cx) {
                        return Poll::Ready(Step::Write(bytes));
                    }
                    let mut rb = ReadBuf::new(&mut buf);
                    match Pin::new(&mut watched).poll_read(cx, &mut rb) {
                        Poll::Ready(r) => Poll::Ready(Step::Read(r.map(|()| rb.filled().to_vec()))),
                        Poll::Pending => Poll::Pending,
                    }
                })
                .await;
                match step {
                    Step::Write(Some(bytes)) => {
                        watched.write_all(&bytes).await.expect("write");
                        watched.flush().await.expect("flush");
                    }
                    Step::Write(None) => return,
                    Step::Read(Ok(bytes)) => {
                        let end = bytes.is_empty();
                        let _ = read_tx.send(bytes);
                        if end {
                            return;
                        }
                    }
                    Step::Read(Err(_)) => return,
                }
            }
        });
        (Self { read, write }, client)
    }

    /// Everything read until `want` bytes arrived (or the stream ended).
    async fn read_bytes(&mut self, want: usize) -> Vec<u8> {
        let mut all = Vec::new();
        while all.len() < want {
            match self.read.recv().await {
                Some(piece) if !piece.is_empty() => all.extend(piece),
                _ => break,
            }
        }
        all
    }

    async fn sees_end_of_stream(&mut self) -> bool {
        loop {
            match self.read.recv().await {
                Some(piece) if piece.is_empty() => return true,
                Some(_) => continue,
                None => return false,
            }
        }
    }
}

fn policy() -> Http2Policy {
    Http2Policy {
        keepalive_time: Duration::from_secs(10),
        keepalive_timeout: Duration::from_secs(5),
        ..Http2Policy::default()
    }
}

async fn read_exact(client: &mut DuplexStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    client.read_exact(&mut buf).await.expect("read");
    buf
}

#[tokio::test(start_paused = true)]
async fn too_many_pings_get_a_goaway_enhance_your_calm_and_the_connection_closes() {
    let (mut hyper, mut client) = Hyper::start(policy(), Arc::default(), 4096);
    let mut sent = PREFACE.to_vec();
    sent.extend(header(0, frames::HEADERS, 0x5, 3));
    for i in 0..4u8 {
        sent.extend(ping_frame(false, [i; 8]));
    }
    client.write_all(&sent).await.expect("write");
    assert_eq!(
        hyper.read_bytes(sent.len()).await,
        sent,
        "hyper reads the client's pings (and acknowledges them itself)"
    );
    let mut goaway = header(22, frames::GOAWAY, 0, 0);
    goaway.extend(3u32.to_be_bytes());
    goaway.extend(frames::ENHANCE_YOUR_CALM.to_be_bytes());
    goaway.extend(b"too_many_pings");
    assert_eq!(read_exact(&mut client, goaway.len()).await, goaway);
    drop(client);
    assert!(hyper.sees_end_of_stream().await);
}

#[tokio::test(start_paused = true)]
async fn pings_at_the_allowed_interval_are_fine() {
    let calls = Arc::new(CallCount::default());
    let _call = calls.begin();
    let (mut hyper, mut client) = Hyper::start(
        Http2Policy {
            min_recv_ping_interval: Duration::from_secs(1),
            keepalive_time: Duration::from_secs(3600),
            ..policy()
        },
        calls,
        4096,
    );
    client.write_all(PREFACE).await.expect("write");
    hyper.read_bytes(PREFACE.len()).await;
    for i in 0..5u8 {
        client
            .write_all(&ping_frame(false, [i; 8]))
            .await
            .expect("write");
        assert_eq!(hyper.read_bytes(PING_FRAME_LEN).await.len(), PING_FRAME_LEN);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let mut byte = [0u8; 1];
    assert!(
        timeout(Duration::from_secs(60), client.read(&mut byte))
            .await
            .is_err(),
        "no GOAWAY: with a call in flight one ping a second is allowed"
    );
}

#[tokio::test(start_paused = true)]
async fn keepalive_pings_go_out_and_their_acks_never_reach_hyper() {
    let calls = Arc::new(CallCount::default());
    let _call = calls.begin();
    let (mut hyper, mut client) = Hyper::start(policy(), calls, 4096);
    client.write_all(PREFACE).await.expect("write");
    hyper.read_bytes(PREFACE.len()).await;
    let ping = read_exact(&mut client, PING_FRAME_LEN).await;
    assert_eq!(ping, ping_frame(false, KEEPALIVE_PAYLOAD));
    // The acknowledgement between two frames for hyper, one byte at a time.
    let mut sent = data_frame(1, b"before");
    sent.extend(ping_frame(true, KEEPALIVE_PAYLOAD));
    sent.extend(data_frame(1, b"after"));
    for byte in &sent {
        client.write_all(&[*byte]).await.expect("write");
        tokio::task::yield_now().await;
    }
    let mut expected = data_frame(1, b"before");
    expected.extend(data_frame(1, b"after"));
    assert_eq!(hyper.read_bytes(expected.len()).await, expected);
    // Answered: the next one comes after another quiet period, and goes unanswered.
    let again = read_exact(&mut client, PING_FRAME_LEN).await;
    assert_eq!(again, ping_frame(false, KEEPALIVE_PAYLOAD));
    assert!(
        hyper.sees_end_of_stream().await,
        "no ack within the timeout: closed"
    );
}

#[tokio::test(start_paused = true)]
async fn a_tiny_read_buffer_still_gets_every_byte_but_ours() {
    let calls = Arc::new(CallCount::default());
    let _call = calls.begin();
    let (mut hyper, mut client) = Hyper::start(policy(), calls, 3);
    client.write_all(PREFACE).await.expect("write");
    hyper.read_bytes(PREFACE.len()).await;
    read_exact(&mut client, PING_FRAME_LEN).await;
    let foreign_ack = ping_frame(true, *b"h2shutdn");
    let mut sent = foreign_ack.to_vec();
    sent.extend(ping_frame(true, KEEPALIVE_PAYLOAD));
    sent.extend(data_frame(1, b"xyz"));
    client.write_all(&sent).await.expect("write");
    let mut expected = foreign_ack.to_vec();
    expected.extend(data_frame(1, b"xyz"));
    assert_eq!(
        hyper.read_bytes(expected.len()).await,
        expected,
        "an acknowledgement of another PING (hyper's) passes"
    );
}

#[tokio::test(start_paused = true)]
async fn our_ping_waits_for_the_end_of_the_frame_hyper_is_writing() {
    let calls = Arc::new(CallCount::default());
    let _call = calls.begin();
    let (hyper, mut client) = Hyper::start(policy(), calls, 4096);
    let frame = data_frame(1, &[7u8; 100]);
    hyper.write.send(frame[..50].to_vec()).expect("send");
    assert_eq!(read_exact(&mut client, 50).await, frame[..50]);
    // The ping falls due while the DATA frame is half written.
    tokio::time::sleep(Duration::from_secs(11)).await;
    hyper.write.send(frame[50..].to_vec()).expect("send");
    assert_eq!(read_exact(&mut client, frame.len() - 50).await, frame[50..]);
    assert_eq!(
        read_exact(&mut client, PING_FRAME_LEN).await,
        ping_frame(false, KEEPALIVE_PAYLOAD)
    );
}

#[tokio::test(start_paused = true)]
async fn no_more_than_max_pings_without_data_until_data_goes_out() {
    let calls = Arc::new(CallCount::default());
    let _call = calls.begin();
    let (hyper, mut client) = Hyper::start(policy(), calls, 4096);
    client.write_all(PREFACE).await.expect("write");
    for _ in 0..2 {
        read_exact(&mut client, PING_FRAME_LEN).await;
        client
            .write_all(&ping_frame(true, KEEPALIVE_PAYLOAD))
            .await
            .expect("write");
    }
    let mut byte = [0u8; 1];
    assert!(
        timeout(Duration::from_secs(600), client.read(&mut byte))
            .await
            .is_err(),
        "a third ping waits for data"
    );
    let frame = header(0, frames::HEADERS, 0x4, 1);
    hyper.write.send(frame.clone()).expect("send");
    assert_eq!(read_exact(&mut client, frame.len()).await, frame);
    assert_eq!(
        read_exact(&mut client, PING_FRAME_LEN).await,
        ping_frame(false, KEEPALIVE_PAYLOAD)
    );
}

#[tokio::test(start_paused = true)]
async fn without_calls_the_server_does_not_ping() {
    let (_hyper, mut client) = Hyper::start(policy(), Arc::default(), 4096);
    let mut byte = [0u8; 1];
    assert!(timeout(Duration::from_secs(600), client.read(&mut byte))
        .await
        .is_err());
}

#[tokio::test(start_paused = true)]
async fn the_connection_closes_at_its_age_plus_grace() {
    let calls = Arc::new(CallCount::default());
    let _call = calls.begin();
    let (mut hyper, _client) = Hyper::start(
        Http2Policy {
            keepalive_time: Duration::from_secs(3600),
            max_connection_age: Some(Duration::from_secs(30)),
            max_connection_age_grace: Some(Duration::from_secs(5)),
            ..policy()
        },
        calls,
        4096,
    );
    let start = Instant::now();
    assert!(hyper.sees_end_of_stream().await);
    assert_eq!(start.elapsed(), Duration::from_secs(35));
}
