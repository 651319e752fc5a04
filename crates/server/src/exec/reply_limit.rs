//! A reply's items against `--max-reply` (Tokyo Tyrant's lists and
//! searches, HandlerSocket's finds): kura copies what it sends, so what one
//! request holds is bounded.

/// A reply's items against `--max-reply`: the first always goes (an item
/// of -I and its key), the others while together they fit.
pub struct ReplyLimit {
    limit: usize,
    bytes: usize,
    items: usize,
}

impl ReplyLimit {
    pub fn new(limit: usize) -> Self {
        ReplyLimit {
            limit,
            bytes: 0,
            items: 0,
        }
    }

    /// Counts an item of `len` bytes; false once the reply holds too much.
    pub fn take(&mut self, len: usize) -> bool {
        self.bytes += len;
        self.items += 1;
        self.fits()
    }

    /// Takes back an item counted before (one the reply dropped since).
    pub fn give_back(&mut self, len: usize) {
        self.bytes -= len;
        self.items -= 1;
    }

    pub fn fits(&self) -> bool {
        self.items <= 1 || self.bytes <= self.limit
    }
}
