//! A connection's replies the socket has not taken yet. They are sent from
//! the front without moving the rest at every write: a client reading a
//! large reply a few kilobytes at a time would otherwise have its worker
//! copy all that is left at each of them (quadratic in the reply).

/// Capacity kept once everything is sent: a reply held for the log (a
/// set's `STORED`) would otherwise cost an allocation per request; a large
/// buffer is given back, since thousands of connections may sit idle.
const KEPT: usize = 256;

#[derive(Default)]
pub struct PendingOutput {
    bytes: Vec<u8>,
    /// How much of `bytes` the socket has taken.
    sent: usize,
}

impl PendingOutput {
    pub fn is_empty(&self) -> bool {
        self.sent == self.bytes.len()
    }

    /// What is left to send.
    pub fn unsent(&self) -> &[u8] {
        &self.bytes[self.sent..]
    }

    pub fn extend_from_slice(&mut self, replies: &[u8]) {
        self.bytes.extend_from_slice(replies);
    }

    /// The buffer replies are appended to.
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }

    /// The socket took `count` more bytes.
    pub fn sent(&mut self, count: usize) {
        self.sent += count;
        if self.is_empty() {
            self.bytes.clear();
            self.sent = 0;
            if self.bytes.capacity() > KEPT {
                self.bytes = Vec::new();
            }
        } else if self.sent > self.bytes.len() / 2 {
            // The rest moves to the front once it is the smaller part, so
            // each byte moves about once; the memory goes back as it drains.
            self.bytes.drain(..self.sent);
            self.sent = 0;
            if self.bytes.capacity() > 4 * self.bytes.len() {
                self.bytes.shrink_to((2 * self.bytes.len()).max(KEPT));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_sent_in_pieces_goes_out_whole_and_in_order() {
        let reply: Vec<u8> = (0..100_000u32).map(|n| n as u8).collect();
        let mut output = PendingOutput::default();
        output.extend_from_slice(&reply);
        let mut received = Vec::new();
        while !output.is_empty() {
            let piece = output.unsent().len().min(4096);
            received.extend_from_slice(&output.unsent()[..piece]);
            output.sent(piece);
            // What is held shrinks with what is left.
            assert!(
                output.bytes.capacity() <= 4 * output.unsent().len().max(KEPT) + reply.len() / 2
            );
        }
        assert_eq!(received, reply);
        assert_eq!(output.bytes.capacity(), 0, "a large buffer is given back");
        output.extend_from_slice(b"STORED\r\n");
        assert_eq!(output.unsent(), b"STORED\r\n");
    }
}
