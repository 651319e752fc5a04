//! A reply's items against `--max-reply` (Tokyo Tyrant's lists and
//! searches, HandlerSocket's finds): kura copies what it sends, so what one
//! request holds is bounded.

/// A reply's items against `--max-reply`: the first always goes (an item
/// of -I and its key), up to `first_at_most` if set, the others while
/// together they fit.
pub struct ReplyLimit {
    limit: usize,
    first_at_most: usize,
    bytes: usize,
    items: usize,
}

impl ReplyLimit {
    pub fn new(limit: usize) -> Self {
        ReplyLimit {
            limit,
            first_at_most: usize::MAX,
            bytes: 0,
            items: 0,
        }
    }

    /// Bounds the first item too: where one item's reply can be many
    /// times what it holds (a HandlerSocket row written once for each
    /// time its columns were opened).
    pub fn with_first_at_most(self, first_at_most: usize) -> Self {
        ReplyLimit {
            first_at_most,
            ..self
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
        self.bytes <= self.limit || (self.items <= 1 && self.bytes <= self.first_at_most)
    }
}
