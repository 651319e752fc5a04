//! A connection's wait for a line end. A text line longer than memcached's
//! limit (2,048 bytes) that the session still waits for is a multi-get, and
//! nothing but its line end can change that: it is searched once rather
//! than again from its start at every read. Shorter lines, and anything
//! else, are served at every read as they come (an HTTP head, whose parser
//! may refuse a byte or a length before any line end, is never skipped).

use kura_proto::MAX_LINE_LEN;

#[derive(Debug, Default)]
pub struct LineWait {
    /// The input holds no line end up to here, and the session waits for
    /// one past memcached's line limit (0: not so).
    scanned: usize,
}

impl LineWait {
    /// Whether `input`, grown from `start` bytes by a read, can go on
    /// waiting without being served: the session waited on all of it
    /// before, and the read brought no line end.
    pub fn still_waiting(&mut self, input: &[u8], start: usize) -> bool {
        let waiting = start > 0 && self.scanned == start && !input[start..].contains(&b'\n');
        if waiting {
            self.scanned = input.len();
        }
        waiting
    }

    /// The session served `input` and left it; `awaits_line`: it used none
    /// of it and waits for a line end whatever else comes.
    pub fn served(&mut self, input: &[u8], awaits_line: bool) {
        let waits = awaits_line && input.len() > MAX_LINE_LEN && !input.contains(&b'\n');
        self.scanned = if waits { input.len() } else { 0 };
    }

    pub fn forget(&mut self) {
        self.scanned = 0;
    }

    /// Whether all of `input` is known to hold no line end.
    pub fn holds_no_line(&self, input: &[u8]) -> bool {
        !input.is_empty() && self.scanned == input.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multi_get_past_the_line_limit_is_searched_once() {
        let mut wait = LineWait::default();
        let mut input = b"get ".to_vec();
        input.resize(MAX_LINE_LEN, b'k');
        // Within the limit: served at every read (the session may yet
        // refuse a line that is no multi-get).
        wait.served(&input, true);
        assert!(!wait.holds_no_line(&input));
        let start = input.len();
        input.push(b'k');
        assert!(!wait.still_waiting(&input, start));
        // Past it, still waited for: a multi-get, until its line end.
        wait.served(&input, true);
        assert!(wait.holds_no_line(&input));
        for _ in 0..1000 {
            let start = input.len();
            input.extend_from_slice(b" key");
            assert!(wait.still_waiting(&input, start));
        }
        let start = input.len();
        input.extend_from_slice(b"\r\n");
        assert!(!wait.still_waiting(&input, start), "a line end: served");
    }

    #[test]
    fn nothing_is_skipped_unless_the_session_waited_for_a_line() {
        let mut wait = LineWait::default();
        let long = vec![b'x'; MAX_LINE_LEN + 1];
        // A binary request, an HTTP head, or a line already whole.
        wait.served(&long, false);
        assert!(!wait.still_waiting(&[&long[..], b"x"].concat(), long.len()));
        let mut set = b"set k 0 0 5000\r\n".to_vec();
        set.resize(MAX_LINE_LEN + 10, b'v');
        wait.served(&set, true);
        assert!(!wait.still_waiting(&[&set[..], b"v"].concat(), set.len()));
        wait.forget();
        assert!(!wait.holds_no_line(b"x"));
    }
}
