//! A connection's wait for a line end. A long line sent a few bytes at a
//! time is searched once rather than again from its start at every read;
//! the session still sees it each time it has doubled, so that the limits
//! on a line's length (memcached's 2,048 bytes for all but a multi-get, an
//! HTTP head's cap, the request size) are kept, at most twice as late.

#[derive(Debug, Default)]
pub struct LineWait {
    /// The input holds no line end up to here (0: not known).
    scanned: usize,
    /// The input's length when the session last waited for a line end.
    served_at: usize,
}

impl LineWait {
    /// Whether `input`, grown from `start` bytes by a read, can go on
    /// waiting without being served: no line end came, and it has not
    /// doubled since the session last saw it.
    pub fn still_waiting(&mut self, input: &[u8], start: usize) -> bool {
        let waiting = start > 0
            && self.scanned == start
            && input.len() < 2 * self.served_at
            && !input[start..].contains(&b'\n');
        if waiting {
            self.scanned = input.len();
        }
        waiting
    }

    /// The session served `input` and left it; `awaits_line`: it used none
    /// of it and waits for a line end.
    pub fn served(&mut self, input: &[u8], awaits_line: bool) {
        *self = match awaits_line && !input.contains(&b'\n') {
            true => LineWait {
                scanned: input.len(),
                served_at: input.len(),
            },
            false => LineWait::default(),
        };
    }

    pub fn forget(&mut self) {
        *self = LineWait::default();
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
    fn a_line_is_searched_once_until_it_doubles() {
        let mut wait = LineWait::default();
        let mut input = b"get ".to_vec();
        input.extend_from_slice(&[b'k'; 96]);
        wait.served(&input, true);
        assert!(wait.holds_no_line(&input));
        // Grown by reads without a line end: no serve until 200 bytes.
        for _ in 0..99 {
            let start = input.len();
            input.push(b'k');
            assert!(wait.still_waiting(&input, start));
        }
        let start = input.len();
        input.push(b'k');
        assert!(!wait.still_waiting(&input, start), "doubled: served again");
        wait.served(&input, true);
        let start = input.len();
        input.extend_from_slice(b"\r\n");
        assert!(!wait.still_waiting(&input, start), "a line end: served");
    }

    #[test]
    fn nothing_is_skipped_unless_the_session_waited_for_a_line() {
        let mut wait = LineWait::default();
        // A binary request, or a line already whole (a value to come).
        wait.served(b"\x80\x01", false);
        assert!(!wait.still_waiting(b"\x80\x01\x00", 2));
        wait.served(b"set k 0 0 5\r\nab", true);
        assert!(!wait.still_waiting(b"set k 0 0 5\r\nabc", 15));
        wait.forget();
        assert!(!wait.holds_no_line(b"x"));
    }
}
