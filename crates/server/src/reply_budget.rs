//! `-o read_buf_mem_limit`: a bound on the memory a worker's replies take
//! before they are sent, as memcached bounds its response objects.
//!
//! memcached composes each response in an object carrying a 1 KiB write
//! buffer, one per key of a multiget and one per request, drawn from a pool
//! of `read_buf_mem_limit / threads` bytes per worker thread. When the pool
//! runs dry mid-request it answers `SERVER_ERROR out of memory writing get
//! response`; when a pipeline of requests drains it, it closes the
//! connection. kura composes replies into one buffer per worker, so the
//! limit is kept as a budget in memcached's terms: each response is charged
//! [`RESPONSE_CHARGE`] against the worker's share, for the requests served
//! from one read of a connection (their replies are then written out).
//! Without the option (0, memcached's default) nothing is charged.

/// What memcached's response object costs: its write buffer.
pub const RESPONSE_CHARGE: usize = 1024;

/// The responses charged so far in one batch of a connection's requests.
#[derive(Debug, Clone, Copy)]
pub struct ReplyBudget {
    /// Bytes the batch may charge; None when unbounded.
    share: Option<usize>,
    charged: usize,
}

/// What a request's charge came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charge {
    Within,
    /// This request alone needs more than the whole share.
    TooLarge,
    /// The batch's requests together ran out of the share.
    Exhausted,
}

impl ReplyBudget {
    /// `limit_bytes` for the whole server (0: unbounded), split evenly over
    /// `threads` workers.
    pub fn new(limit_bytes: usize, threads: usize) -> Self {
        ReplyBudget {
            share: (limit_bytes > 0).then(|| (limit_bytes / threads.max(1)).max(RESPONSE_CHARGE)),
            charged: 0,
        }
    }

    /// Charges a request that will compose `responses` responses.
    pub fn charge(&mut self, responses: usize) -> Charge {
        self.charge_with(|| responses)
    }

    /// As `charge`, counting the responses only when there is a limit.
    #[inline]
    pub fn charge_with(&mut self, responses: impl FnOnce() -> usize) -> Charge {
        let Some(share) = self.share else {
            return Charge::Within;
        };
        let responses = responses();
        let cost = responses.max(1).saturating_mul(RESPONSE_CHARGE);
        if cost > share {
            Charge::TooLarge
        } else if self.charged + cost > share {
            Charge::Exhausted
        } else {
            self.charged += cost;
            Charge::Within
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_limit_nothing_is_charged() {
        let mut budget = ReplyBudget::new(0, 4);
        assert_eq!(budget.charge(1_000_000), Charge::Within);
    }

    #[test]
    fn a_worker_gets_its_share_in_responses_of_one_kib() {
        // memcached's conn-limits.t: 1 MiB over 32 workers is 32 responses.
        let mut budget = ReplyBudget::new(1 << 20, 32);
        assert_eq!(budget.charge(500), Charge::TooLarge);
        assert_eq!(budget.charge(32), Charge::Within);
        assert_eq!(budget.charge(1), Charge::Exhausted);
        let mut budget = ReplyBudget::new(1 << 20, 32);
        for _ in 0..32 {
            assert_eq!(budget.charge(1), Charge::Within);
        }
        assert_eq!(budget.charge(1), Charge::Exhausted);
    }
}
