//! HTTP/2 frame headers read as the bytes go by, for the connection policy
//! ([`crate::watch`]): hyper's h2 answers PINGs and writes frames itself, so the gRPC
//! server's ping-abuse and keep-alive rules (which need to know when a client pinged and
//! when the server last sent data) watch the plaintext byte streams instead.
//!
//! The [`Scanner`] keeps a few bytes of state and never allocates: it reads each frame's
//! 9-byte header (RFC 9113 §4.1), skips its payload by length, and reads a PING's 8-byte
//! payload. Bytes may arrive in pieces of any size, a header split across reads included.

/// The client connection preface (RFC 9113 §3.4) that opens the client's byte stream.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Bytes in a frame header.
pub const HEADER_LEN: usize = 9;
/// Bytes in a whole PING frame: the header and the 8-byte opaque payload.
pub const PING_FRAME_LEN: usize = HEADER_LEN + 8;

/// Frame type DATA.
pub const DATA: u8 = 0x0;
/// Frame type HEADERS.
pub const HEADERS: u8 = 0x1;
/// Frame type PING.
pub const PING: u8 = 0x6;
/// Frame type GOAWAY.
pub const GOAWAY: u8 = 0x7;
/// The ACK flag of a PING frame.
pub const ACK: u8 = 0x1;
/// The first five header bytes of a PING ACK as (value, mask): length 8, type PING, the
/// ACK flag (other flags are ignored, as RFC 9113 says).
const PING_ACK_START: [(u8, u8); 5] = [(0, 0xff), (0, 0xff), (8, 0xff), (PING, 0xff), (ACK, ACK)];
/// HTTP/2 error code NO_ERROR, for a graceful GOAWAY.
pub const NO_ERROR: u32 = 0x0;
/// HTTP/2 error code ENHANCE_YOUR_CALM, which gRPC's GOAWAY for too many pings carries.
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// One frame's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload length.
    pub length: u32,
    /// Frame type.
    pub kind: u8,
    /// Flags.
    pub flags: u8,
    /// Stream identifier (the reserved bit cleared).
    pub stream_id: u32,
}

impl FrameHeader {
    fn parse(bytes: &[u8; HEADER_LEN]) -> Self {
        Self {
            length: u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]),
            kind: bytes[3],
            flags: bytes[4],
            stream_id: u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) & 0x7fff_ffff,
        }
    }

    /// Whether this is a PING frame (acknowledgement or not) with its 8-byte payload.
    fn is_ping(&self) -> bool {
        self.kind == PING && self.length == 8
    }
}

/// What the scanner found in the bytes it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A frame header was read whole (for a PING, a [`Event::Ping`] follows).
    Frame(FrameHeader),
    /// A PING frame was read whole.
    Ping {
        /// Whether it acknowledges a PING.
        ack: bool,
        /// Its opaque payload.
        payload: [u8; 8],
    },
}

/// Where the scanner is in the byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Inside the client preface, with this many bytes of it to go.
    Preface(u8),
    /// Inside a frame header, with `len` of its bytes read (0: at a frame boundary).
    Header { bytes: [u8; HEADER_LEN], len: u8 },
    /// Inside a PING's payload.
    Ping { ack: bool, bytes: [u8; 8], len: u8 },
    /// Inside some other payload, with this many bytes to go.
    Skip(u32),
}

/// Reads frame boundaries out of one direction of an HTTP/2 connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scanner {
    state: State,
}

impl Scanner {
    /// For the bytes a client sends: the connection preface, then frames.
    pub fn client() -> Self {
        Self {
            state: State::Preface(PREFACE.len() as u8),
        }
    }

    /// For the bytes a server sends: frames from the first byte.
    pub fn server() -> Self {
        Self::boundary()
    }

    fn boundary() -> Self {
        Self {
            state: State::Header {
                bytes: [0; HEADER_LEN],
                len: 0,
            },
        }
    }

    /// Reads `data` up to the next event or frame boundary, whichever comes first:
    /// returns the bytes consumed and the event, if one completed.
    pub fn advance(&mut self, data: &[u8]) -> (usize, Option<Event>) {
        let mut used = 0;
        while used < data.len() {
            let rest = &data[used..];
            match &mut self.state {
                State::Preface(left) => {
                    let n = rest.len().min(usize::from(*left));
                    used += n;
                    *left -= n as u8;
                    if *left == 0 {
                        *self = Self::boundary();
                        return (used, None);
                    }
                }
                State::Header { bytes, len } => {
                    let at = usize::from(*len);
                    let n = rest.len().min(HEADER_LEN - at);
                    bytes[at..at + n].copy_from_slice(&rest[..n]);
                    used += n;
                    *len += n as u8;
                    if usize::from(*len) == HEADER_LEN {
                        let header = FrameHeader::parse(bytes);
                        self.state = if header.is_ping() {
                            State::Ping {
                                ack: header.flags & ACK != 0,
                                bytes: [0; 8],
                                len: 0,
                            }
                        } else if header.length == 0 {
                            Self::boundary().state
                        } else {
                            State::Skip(header.length)
                        };
                        return (used, Some(Event::Frame(header)));
                    }
                }
                State::Ping { ack, bytes, len } => {
                    let at = usize::from(*len);
                    let n = rest.len().min(8 - at);
                    bytes[at..at + n].copy_from_slice(&rest[..n]);
                    used += n;
                    *len += n as u8;
                    if *len == 8 {
                        let event = Event::Ping {
                            ack: *ack,
                            payload: *bytes,
                        };
                        *self = Self::boundary();
                        return (used, Some(event));
                    }
                }
                State::Skip(left) => {
                    let n = rest.len().min(*left as usize);
                    used += n;
                    *left -= n as u32;
                    if *left == 0 {
                        *self = Self::boundary();
                        return (used, None);
                    }
                }
            }
        }
        (used, None)
    }

    /// Whether the bytes read so far end exactly at a frame boundary, where another
    /// whole frame may be put into the stream.
    pub fn at_boundary(&self) -> bool {
        matches!(self.state, State::Header { len: 0, .. })
    }

    /// How many leading bytes of `data` finish the frame under way, so that a frame may
    /// be put in after them: 0 at a boundary, `None` when `data` ends inside the frame.
    pub fn to_boundary(&self, data: &[u8]) -> Option<usize> {
        let mut probe = *self;
        let mut used = 0;
        while !probe.at_boundary() {
            if used == data.len() {
                return None;
            }
            used += probe.advance(&data[used..]).0;
        }
        Some(used)
    }

    /// The bytes of an unfinished frame that could still turn out to be a PING
    /// acknowledgement: a partial header whose bytes so far fit one, or a partial PING
    /// ACK (header and payload so far). 0 otherwise. The reader holds these back until
    /// the frame is whole.
    pub fn undecided(&self) -> usize {
        match self.state {
            State::Header { bytes, len } => {
                let seen = usize::from(len);
                let fits = bytes[..seen.min(5)]
                    .iter()
                    .zip(PING_ACK_START)
                    .all(|(byte, (want, mask))| byte & mask == want);
                if fits {
                    seen
                } else {
                    0
                }
            }
            State::Ping { ack: true, len, .. } => HEADER_LEN + usize::from(len),
            _ => 0,
        }
    }

    /// Forgets an unfinished frame whose bytes the reader holds back, to read it again
    /// from its first byte.
    pub fn rewind(&mut self) {
        *self = Self::boundary();
    }
}

/// A PING frame (acknowledgement or not) with `payload`.
pub fn ping_frame(ack: bool, payload: [u8; 8]) -> [u8; PING_FRAME_LEN] {
    let mut frame = [0u8; PING_FRAME_LEN];
    frame[2] = 8;
    frame[3] = PING;
    frame[4] = if ack { ACK } else { 0 };
    frame[HEADER_LEN..].copy_from_slice(&payload);
    frame
}

/// Writes a GOAWAY frame on stream 0 into `out` and returns its length; `out` must hold
/// `HEADER_LEN + 8 + debug.len()` bytes.
pub fn goaway_frame(out: &mut [u8], last_stream_id: u32, error: u32, debug: &[u8]) -> usize {
    let length = 8 + debug.len();
    let total = HEADER_LEN + length;
    let frame = &mut out[..total];
    frame[..3].copy_from_slice(&(length as u32).to_be_bytes()[1..]);
    frame[3] = GOAWAY;
    frame[4] = 0;
    frame[5..9].copy_from_slice(&[0; 4]);
    frame[9..13].copy_from_slice(&(last_stream_id & 0x7fff_ffff).to_be_bytes());
    frame[13..17].copy_from_slice(&error.to_be_bytes());
    frame[17..].copy_from_slice(debug);
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(length: u32, kind: u8, flags: u8, stream_id: u32) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..3].copy_from_slice(&length.to_be_bytes()[1..]);
        h[3] = kind;
        h[4] = flags;
        h[5..].copy_from_slice(&stream_id.to_be_bytes());
        h
    }

    /// A client stream: preface, SETTINGS (6 bytes), HEADERS on stream 1 (3 bytes), DATA
    /// (5 bytes), a PING, a PING ACK.
    fn client_stream() -> Vec<u8> {
        let mut s = PREFACE.to_vec();
        s.extend(header(6, 0x4, 0, 0));
        s.extend([0; 6]);
        s.extend(header(3, HEADERS, 0x4, 1));
        s.extend([1, 2, 3]);
        s.extend(header(5, DATA, 0x1, 1));
        s.extend([9; 5]);
        s.extend(ping_frame(false, *b"abcdefgh"));
        s.extend(ping_frame(true, *b"12345678"));
        s
    }

    fn events_in_pieces(data: &[u8], piece: usize) -> Vec<Event> {
        let mut scanner = Scanner::client();
        let mut events = Vec::new();
        for chunk in data.chunks(piece) {
            let mut at = 0;
            while at < chunk.len() {
                let (used, event) = scanner.advance(&chunk[at..]);
                at += used;
                events.extend(event);
            }
        }
        assert!(scanner.at_boundary(), "the stream ends on a frame boundary");
        events
    }

    #[test]
    fn frames_are_found_whatever_the_read_sizes() {
        let stream = client_stream();
        let whole = events_in_pieces(&stream, stream.len());
        assert_eq!(whole.len(), 7, "{whole:?}");
        assert_eq!(
            whole[1],
            Event::Frame(FrameHeader {
                length: 3,
                kind: HEADERS,
                flags: 0x4,
                stream_id: 1
            })
        );
        assert_eq!(
            whole[4],
            Event::Ping {
                ack: false,
                payload: *b"abcdefgh"
            }
        );
        assert_eq!(
            whole[6],
            Event::Ping {
                ack: true,
                payload: *b"12345678"
            }
        );
        for piece in [1, 2, 5, 9, 10, 17, 23, 24, 25] {
            assert_eq!(events_in_pieces(&stream, piece), whole, "pieces of {piece}");
        }
    }

    #[test]
    fn the_preface_is_skipped_only_on_the_client_side() {
        let mut server = Scanner::server();
        assert!(server.at_boundary());
        let (used, event) = server.advance(&header(0, 0x4, ACK, 0));
        assert_eq!(used, HEADER_LEN);
        assert!(matches!(event, Some(Event::Frame(h)) if h.kind == 0x4 && h.length == 0));
        let mut client = Scanner::client();
        assert!(!client.at_boundary(), "inside the preface");
        assert_eq!(client.advance(&PREFACE[..10]), (10, None));
        assert_eq!(client.advance(&PREFACE[10..]), (14, None));
        assert!(client.at_boundary());
    }

    #[test]
    fn the_reserved_stream_bit_is_ignored() {
        let mut scanner = Scanner::server();
        let (_, event) = scanner.advance(&header(0, HEADERS, 0, 0x8000_0003));
        assert!(matches!(event, Some(Event::Frame(h)) if h.stream_id == 3));
    }

    #[test]
    fn the_way_to_the_next_boundary_is_measured_without_moving() {
        let mut scanner = Scanner::server();
        let mut data = header(4, DATA, 0, 1).to_vec();
        data.extend([0; 4]);
        data.extend(header(0, HEADERS, 0, 3));
        assert_eq!(scanner.to_boundary(&data), Some(0));
        feed(&mut scanner, &data[..5]);
        assert_eq!(scanner.to_boundary(&data[5..]), Some(8), "rest of DATA");
        assert_eq!(scanner.to_boundary(&data[5..10]), None);
        assert!(
            !scanner.at_boundary(),
            "probing left the scanner where it was"
        );
    }

    /// Feeds all of `data`.
    fn feed(scanner: &mut Scanner, data: &[u8]) {
        let mut at = 0;
        while at < data.len() {
            at += scanner.advance(&data[at..]).0;
        }
    }

    #[test]
    fn only_partial_headers_and_ping_acks_are_undecided() {
        let mut scanner = Scanner::server();
        let ack = ping_frame(true, [7; 8]);
        feed(&mut scanner, &ack[..4]);
        assert_eq!(scanner.undecided(), 4);
        feed(&mut scanner, &ack[4..12]);
        assert_eq!(scanner.undecided(), 12, "header and 3 payload bytes");
        scanner.rewind();
        assert!(scanner.at_boundary());
        let ping = ping_frame(false, [7; 8]);
        feed(&mut scanner, &ping[..12]);
        assert_eq!(scanner.undecided(), 0, "a PING is never held back");
        let mut scanner = Scanner::server();
        feed(&mut scanner, &header(100, DATA, 0, 1));
        assert_eq!(scanner.undecided(), 0, "inside a payload");
        let mut scanner = Scanner::server();
        feed(&mut scanner, &header(8, DATA, 0, 1)[..4]);
        assert_eq!(
            scanner.undecided(),
            0,
            "a partial header that is not a PING's"
        );
        let mut scanner = Scanner::server();
        feed(&mut scanner, &ping_frame(false, [0; 8])[..6]);
        assert_eq!(scanner.undecided(), 0, "a PING without the ACK flag");
        let mut scanner = Scanner::server();
        feed(&mut scanner, &[0, 0]);
        assert_eq!(scanner.undecided(), 2, "two zero bytes may start anything");
    }

    #[test]
    fn a_payload_ends_at_the_boundary_without_reading_on() {
        let mut scanner = Scanner::server();
        let mut data = header(2, DATA, 0, 1).to_vec();
        data.extend([0; 2]);
        data.extend(header(0, HEADERS, 0, 3));
        assert_eq!(scanner.advance(&data).0, HEADER_LEN, "the DATA header");
        assert_eq!(
            scanner.advance(&data[HEADER_LEN..]),
            (2, None),
            "its payload"
        );
        assert!(scanner.at_boundary());
    }

    #[test]
    fn a_ping_of_the_wrong_length_is_skipped_as_a_payload() {
        let mut scanner = Scanner::server();
        let (_, event) = scanner.advance(&header(4, PING, 0, 0));
        assert!(matches!(event, Some(Event::Frame(h)) if h.kind == PING));
        assert_eq!(scanner.advance(&[0; 4]), (4, None));
        assert!(scanner.at_boundary());
    }

    #[test]
    fn goaway_carries_the_last_stream_code_and_debug_data() {
        let mut out = [0u8; 64];
        let len = goaway_frame(&mut out, 5, ENHANCE_YOUR_CALM, b"too_many_pings");
        assert_eq!(len, HEADER_LEN + 8 + 14);
        let mut scanner = Scanner::server();
        let (used, event) = scanner.advance(&out[..len]);
        assert_eq!(used, HEADER_LEN);
        assert_eq!(
            event,
            Some(Event::Frame(FrameHeader {
                length: 22,
                kind: GOAWAY,
                flags: 0,
                stream_id: 0
            }))
        );
        assert_eq!(&out[9..13], &[0, 0, 0, 5]);
        assert_eq!(&out[13..17], &[0, 0, 0, 0xb]);
        assert_eq!(&out[17..len], b"too_many_pings");
    }
}
