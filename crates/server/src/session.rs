//! One connection's protocol state, without its socket: consumes request
//! bytes, executes every complete request, appends the replies.
//!
//! The worker owns the socket and the buffers; this keeps the stream in sync
//! (protocol detection, swallowing rejected data blocks) and is tested with
//! plain byte slices.

use kura_proto::{
    binary, detect_protocol, handlersocket, text, tyrant, tyrant_http, Parse, Protocol, Recovery,
};

use crate::auth;
use crate::cyrus::Outcome;
use crate::exec::{self, Action, Context};
use crate::reply_budget::{Charge, ReplyBudget};

/// Stop filling the output once this much is waiting: the client must read
/// before we serve it more (a slow reader cannot make us buffer without bound).
pub const OUTPUT_HIGH_WATER: usize = 1 << 20;

/// Why `serve` stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// Every complete request was served; the rest needs more bytes.
    NeedInput,
    /// The per-event request budget ran out (`-R`): yield to other connections.
    Budget,
    /// The output reached its high-water mark: send before serving more.
    OutputFull,
    /// Close the connection (after sending what is already composed).
    Close,
    /// The client asked the server to shut down.
    Shutdown,
    /// `watch`: the connection becomes a log watcher of these kinds.
    Watch(u32),
    /// `replicate`: the connection becomes a replica's link.
    Replicate(kura_proto::replication::LinkRequest),
    /// `lru_crawler metadump`: the connection writes the dump, then serves
    /// the requests after it.
    Metadump(crate::exec::metadump::CrawlClasses),
    /// `backup` or `copy`: the connection waits for the backup's reply,
    /// then serves the requests after it.
    Backup(crate::exec::backup::BackupRequest),
}

/// What a connection speaks: its listener says (a session is made for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speaks {
    /// memcached's protocols (`-p`, `-l`, `-s`).
    Memcached,
    /// Tokyo Tyrant's binary protocol and memcached's text protocol, told
    /// apart by the first byte, as ttserver's port does (`--tyrant-port`).
    Tyrant,
    /// HandlerSocket's protocol; `write`: the read-write port.
    HandlerSocket { write: bool },
}

#[derive(Debug, Default)]
pub struct Session {
    protocol: Option<Protocol>,
    /// Bytes still to discard from a rejected request's data block.
    swallow: u64,
    /// Logged in (`-Y`) or SASL-authenticated (`-S`); without either
    /// option nobody needs to be.
    authenticated: bool,
    /// The stream was closed for a protocol error or a refused request,
    /// not at the client's request: `reason=error` in a watcher's
    /// `conn_close` line, as memcached's ERROR_CLOSE, and a close that does
    /// not read what follows (`docs/decisions/closing-connections.md`).
    closed_on_error: bool,
    /// The connection's Cyrus SASL conversation, once it speaks SASL.
    cyrus: Option<crate::cyrus::Conversation>,
    /// On `--tyrant-port`: a request starting with 0xC8 is Tokyo Tyrant's,
    /// any other memcached's text protocol.
    tyrant_port: bool,
    /// On a HandlerSocket port: its open indexes and authentication.
    handlersocket: Option<Box<crate::exec::handlersocket::HsConnection>>,
    /// What the request left unserved needs at least (0: not known).
    awaited_bytes: usize,
}

impl Session {
    /// A session fixed to one protocol (`-B ascii|binary`), or deciding by
    /// the first byte (`None`).
    pub fn new(protocol: Option<Protocol>) -> Self {
        Session {
            protocol,
            swallow: 0,
            authenticated: false,
            closed_on_error: false,
            cyrus: None,
            tyrant_port: false,
            handlersocket: None,
            awaited_bytes: 0,
        }
    }

    /// A session on a HandlerSocket port (`write`: the read-write one).
    pub fn handlersocket(write: bool) -> Self {
        Session {
            protocol: Some(Protocol::HandlerSocket),
            handlersocket: Some(Box::new(crate::exec::handlersocket::HsConnection::new(
                write,
            ))),
            ..Session::new(None)
        }
    }

    /// A session on `--tyrant-port`.
    pub fn tyrant() -> Self {
        Session {
            tyrant_port: true,
            ..Session::new(None)
        }
    }

    /// Whether the session ended the stream for a protocol error or a
    /// refused request.
    pub fn closed_on_error(&self) -> bool {
        self.closed_on_error
    }

    /// Whether the request at the front of `input` is decided only by a line
    /// end once it is past memcached's line limit (text and meta commands,
    /// HandlerSocket): not a binary request, whose header gives its length,
    /// nor an HTTP head, which may be refused before its line end.
    pub fn awaits_line(&self, input: &[u8]) -> bool {
        let Some(&first) = input.first() else {
            return false;
        };
        match self.tyrant_port {
            true => memcached_on_tyrant_port(input),
            false => self.protocol.unwrap_or_else(|| detect_protocol(first)) != Protocol::Binary,
        }
    }

    /// Whether the unserved `input` is a memcached request waiting for its
    /// value (a whole text command line, or a whole binary header, and not
    /// all of the rest): memcached's `conn_nread`, which its idle timeout
    /// spares. Tokyo Tyrant's and HandlerSocket's requests are never
    /// spared, as ttserver's `-tout` and the plugin's timeout spare none.
    pub fn reads_memcached_value(&self, input: &[u8]) -> bool {
        let Some(&first) = input.first() else {
            return false;
        };
        let memcached = match self.tyrant_port {
            true => memcached_on_tyrant_port(input),
            false => self.protocol != Some(Protocol::HandlerSocket),
        };
        memcached
            && match first {
                kura_proto::binary::REQUEST_MAGIC => input.len() >= 24,
                _ => input.contains(&b'\n'),
            }
    }

    /// The least the input left unserved must hold before serving it again
    /// can get further (0: not known). A Tokyo Tyrant request of many keys
    /// sent a few bytes at a time is then not parsed from its start at
    /// every read.
    pub fn awaited_bytes(&self) -> usize {
        self.awaited_bytes
    }

    /// Serves the complete requests at the front of `input`. Returns how many
    /// bytes were used and why it stopped.
    pub fn serve(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        ctx: &Context<'_>,
        budget: &mut usize,
    ) -> (usize, Stop) {
        let mut used = 0;
        self.awaited_bytes = 0;
        let started_at = out.len();
        let config = &ctx.shared.config;
        let mut replies = ReplyBudget::new(config.read_buffer_limit, config.threads);
        loop {
            if self.swallow > 0 {
                let dropped = self.swallow.min((input.len() - used) as u64);
                self.swallow -= dropped;
                used += dropped as usize;
                if self.swallow > 0 {
                    return (used, Stop::NeedInput);
                }
            }
            let rest = &input[used..];
            if rest.is_empty() {
                return (used, Stop::NeedInput);
            }
            if out.len() >= OUTPUT_HIGH_WATER {
                return (used, Stop::OutputFull);
            }
            if *budget == 0 {
                return (used, Stop::Budget);
            }
            // ttserver tells its protocols apart request by request.
            let protocol = match self.tyrant_port {
                true if rest[0] == tyrant::MAGIC => Protocol::Tyrant,
                true if tyrant_http::starts_request(rest) => Protocol::TyrantHttp,
                true => Protocol::Text,
                false => *self
                    .protocol
                    .get_or_insert_with(|| detect_protocol(rest[0])),
            };
            let (consumed, action) = match protocol {
                Protocol::Text if !self.authenticated && ctx.shared.text_users.is_some() => {
                    self.log_in(rest, out, ctx)
                }
                Protocol::Text => self.serve_text(rest, out, ctx, &mut replies),
                Protocol::Binary => {
                    if replies.charge(1) == Charge::Exhausted {
                        (0, Step::OutOfReplyMemory)
                    } else {
                        self.serve_binary(rest, out, ctx)
                    }
                }
                Protocol::Tyrant => self.serve_tyrant(rest, out, ctx),
                Protocol::HandlerSocket => self.serve_handlersocket(rest, out, ctx),
                Protocol::TyrantHttp => self.serve_tyrant_http(rest, out, ctx),
            };
            match action {
                Step::Served(Action::Continue) => *budget -= 1,
                Step::Served(Action::Close) => return (used + consumed, Stop::Close),
                Step::Served(Action::Shutdown) => return (used + consumed, Stop::Shutdown),
                // The stop is marked graceful here: `kura serve` then keeps
                // the memory engine's items for a warm restart (`-e`).
                Step::Served(Action::GracefulShutdown) => {
                    ctx.shared.request_graceful_shutdown();
                    return (used + consumed, Stop::Shutdown);
                }
                Step::Served(Action::Watch { kinds }) => {
                    return (used + consumed, Stop::Watch(kinds))
                }
                Step::Served(Action::Replicate(request)) => {
                    return (used + consumed, Stop::Replicate(request))
                }
                Step::Served(Action::Metadump(classes)) => {
                    return (used + consumed, Stop::Metadump(classes))
                }
                Step::Served(Action::Backup(request)) => {
                    return (used + consumed, Stop::Backup(request))
                }
                Step::Incomplete => return (used, Stop::NeedInput),
                // As memcached: the connection goes, with the replies composed
                // for this batch (the requests themselves were served).
                Step::OutOfReplyMemory => {
                    ctx.counters.response_obj_oom.incr();
                    out.truncate(started_at);
                    return (used, Stop::Close);
                }
                Step::Rejected => {}
            }
            used += consumed;
        }
    }

    /// A text connection's requests before it has logged in (`-Y`).
    fn log_in(&mut self, input: &[u8], out: &mut Vec<u8>, ctx: &Context<'_>) -> (usize, Step) {
        let Some(users) = &ctx.shared.text_users else {
            return (0, Step::Rejected);
        };
        match auth::text_login(input, users) {
            auth::TextLogin::Incomplete => (0, Step::Incomplete),
            auth::TextLogin::Answered {
                consumed,
                reply,
                authenticated,
            } => {
                out.extend_from_slice(reply);
                if reply != b"CLIENT_ERROR unauthenticated\r\n" {
                    ctx.counters.auth_cmds.incr();
                    if !authenticated {
                        ctx.counters.auth_errors.incr();
                    }
                }
                self.authenticated = authenticated;
                (consumed, Step::Served(Action::Continue))
            }
        }
    }

    /// SASL on the binary protocol (`-S`): the SASL commands themselves,
    /// and "Auth failure." for anything but `version` before them. None:
    /// the request goes on to be served.
    fn sasl(
        &mut self,
        request: &binary::Request<'_>,
        out: &mut Vec<u8>,
        ctx: &Context<'_>,
    ) -> Option<Action> {
        use binary::{opcode, Status};
        /// memcached's MAX_SASL_MECH_LEN.
        const MAX_MECHANISM_LEN: usize = 32;
        let backend = ctx.shared.sasl.as_ref()?;
        let header = &request.header;
        let reply = |out: &mut Vec<u8>, status, body: &[u8]| {
            binary::compose(out, header.opcode, status, header.opaque, 0, &[], &[], body)
        };
        match header.opcode {
            opcode::SASL_LIST_MECHS => {
                let mechanisms = match backend {
                    auth::SaslBackend::Builtin(_) => Some(auth::SASL_MECHANISMS.to_vec()),
                    auth::SaslBackend::Cyrus(library) => self
                        .conversation(library)
                        .and_then(|conversation| conversation.mechanisms()),
                };
                match mechanisms {
                    Some(list) => reply(out, Status::NoError, &list),
                    None => {
                        binary::compose_error(out, header.opcode, Status::AuthError, header.opaque)
                    }
                }
            }
            opcode::SASL_AUTH | opcode::SASL_STEP if request.key.len() > MAX_MECHANISM_LEN => {
                binary::compose_error(out, header.opcode, Status::InvalidArguments, header.opaque)
            }
            opcode::SASL_AUTH | opcode::SASL_STEP => {
                let starting = header.opcode == opcode::SASL_AUTH;
                let outcome = match backend {
                    // PLAIN is done in one step; a STEP has nothing to continue.
                    auth::SaslBackend::Builtin(users) => {
                        if starting
                            && request.key == b"PLAIN"
                            && auth::sasl_plain(request.value, users)
                        {
                            Outcome::Authenticated
                        } else {
                            Outcome::Failed
                        }
                    }
                    auth::SaslBackend::Cyrus(library) => match self.conversation(library) {
                        Some(conversation) if starting => {
                            conversation.start(request.key, request.value)
                        }
                        Some(conversation) => conversation.step(request.value),
                        None => Outcome::Failed,
                    },
                };
                // As memcached counts: a request that ends the exchange,
                // whichever way; not one the mechanism continues.
                match outcome {
                    Outcome::Authenticated => {
                        ctx.counters.auth_cmds.incr();
                        self.authenticated = true;
                        reply(out, Status::NoError, b"Authenticated");
                    }
                    Outcome::Continue(challenge) => reply(out, Status::AuthContinue, &challenge),
                    Outcome::Failed => {
                        ctx.counters.auth_cmds.incr();
                        ctx.counters.auth_errors.incr();
                        self.authenticated = false;
                        binary::compose_error(out, header.opcode, Status::AuthError, header.opaque);
                    }
                }
            }
            _ if !self.refuses_unauthenticated(header.opcode, ctx) => return None,
            _ => {
                // memcached closes the connection after this answer.
                binary::compose_error(out, header.opcode, Status::AuthError, header.opaque);
                self.closed_on_error = true;
                return Some(Action::Close);
            }
        }
        Some(Action::Continue)
    }

    /// Whether `-S` refuses a request of `code` on this connection: any
    /// but `version` and the SASL commands before authentication.
    fn refuses_unauthenticated(&self, code: u8, ctx: &Context<'_>) -> bool {
        use binary::opcode;
        ctx.shared.sasl.is_some()
            && !self.authenticated
            && !matches!(
                code,
                opcode::VERSION | opcode::SASL_LIST_MECHS | opcode::SASL_AUTH | opcode::SASL_STEP
            )
    }

    /// The connection's Cyrus SASL conversation, begun on first use.
    fn conversation(
        &mut self,
        library: &std::sync::Arc<crate::cyrus::Library>,
    ) -> Option<&mut crate::cyrus::Conversation> {
        if self.cyrus.is_none() {
            self.cyrus = crate::cyrus::Conversation::new(library);
        }
        self.cyrus.as_mut()
    }

    fn serve_text(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        ctx: &Context<'_>,
        replies: &mut ReplyBudget,
    ) -> (usize, Step) {
        match text::parse(input, &ctx.limits()) {
            Parse::Done { request, consumed } => {
                // Counted only under a limit: the hot path skips the key scan.
                let responses = || match &request {
                    text::Request::Get { keys, .. } => keys.iter().count(),
                    _ => 1,
                };
                match replies.charge_with(responses) {
                    Charge::Within => {}
                    Charge::TooLarge if matches!(request, text::Request::Get { .. }) => {
                        ctx.counters.response_obj_oom.incr();
                        out.extend_from_slice(
                            b"SERVER_ERROR out of memory writing get response\r\n",
                        );
                        return (consumed, Step::Served(Action::Continue));
                    }
                    Charge::TooLarge | Charge::Exhausted => return (0, Step::OutOfReplyMemory),
                }
                let discard = request.bytes_to_discard();
                let action = exec::text::execute(request, ctx, out);
                self.recover(Recovery::Swallow(discard));
                (consumed, Step::Served(action))
            }
            Parse::Incomplete => (0, Step::Incomplete),
            Parse::Reject {
                error,
                consumed,
                recovery,
                noreply,
            } => {
                if recovery == Recovery::Close {
                    // memcached closes on garbage without a word.
                    self.closed_on_error = true;
                    return (consumed, Step::Served(Action::Close));
                }
                if !noreply {
                    error.compose(out);
                }
                self.recover(recovery);
                (consumed, Step::Rejected)
            }
        }
    }

    fn serve_binary(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        ctx: &Context<'_>,
    ) -> (usize, Step) {
        match binary::parse(input, ctx.shared.config.max_item_size) {
            binary::Parse::Done { request, consumed } => {
                let action = match self.sasl(&request, out, ctx) {
                    Some(action) => action,
                    None => exec::binary::execute(&request, ctx, out),
                };
                (consumed, Step::Served(action))
            }
            binary::Parse::Incomplete => (0, Step::Incomplete),
            binary::Parse::BadMagic => {
                self.closed_on_error = true;
                (input.len(), Step::Served(Action::Close))
            }
            binary::Parse::TooLarge {
                header,
                key,
                consumed,
                rest,
            } => {
                if self.refuses_unauthenticated(header.opcode, ctx) {
                    // As for any request before authentication: refused,
                    // then the close; the item is left alone.
                    binary::compose_error(
                        out,
                        header.opcode,
                        binary::Status::AuthError,
                        header.opaque,
                    );
                    self.closed_on_error = true;
                    return (consumed, Step::Served(Action::Close));
                }
                exec::binary::too_large(&header, key, ctx, out);
                self.recover(Recovery::Swallow(rest));
                (consumed, Step::Rejected)
            }
            binary::Parse::Reject {
                header,
                status,
                consumed,
                recovery,
            } => {
                // Under -S memcached refuses an unauthenticated request
                // before it looks at the request's framing.
                let status = match status {
                    binary::Status::InvalidArguments
                        if self.refuses_unauthenticated(header.opcode, ctx) =>
                    {
                        binary::Status::AuthError
                    }
                    status => status,
                };
                binary::compose_error(out, header.opcode, status, header.opaque);
                if recovery == Recovery::Close {
                    self.closed_on_error = true;
                    return (consumed, Step::Served(Action::Close));
                }
                self.recover(recovery);
                (consumed, Step::Rejected)
            }
        }
    }

    fn serve_tyrant(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        ctx: &Context<'_>,
    ) -> (usize, Step) {
        // A key, value or argument may be as long as an item (and a
        // `misc` list longer; the worker bounds what one request buffers).
        match tyrant::parse(input, ctx.shared.config.max_item_size) {
            tyrant::Parse::Done { request, consumed } => (
                consumed,
                Step::Served(exec::tyrant::execute(&request, ctx, out)),
            ),
            tyrant::Parse::Incomplete { needed } => {
                self.awaited_bytes = needed;
                (0, Step::Incomplete)
            }
            // ttserver answers nothing and closes.
            tyrant::Parse::Close(_) => {
                self.closed_on_error = true;
                (input.len(), Step::Served(Action::Close))
            }
        }
    }

    fn serve_tyrant_http(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        ctx: &Context<'_>,
    ) -> (usize, Step) {
        match tyrant_http::parse(input, ctx.shared.config.max_item_size) {
            tyrant_http::Parse::Done { request, consumed } => (
                consumed,
                Step::Served(exec::tyrant::http::serve(&request, ctx, out)),
            ),
            // The head is read again only once the body has come.
            tyrant_http::Parse::Incomplete { needed } => {
                self.awaited_bytes = needed;
                (0, Step::Incomplete)
            }
            tyrant_http::Parse::Bad(status) => {
                tyrant_http::reply(out, status, b"", true, false);
                (input.len(), Step::Served(Action::Close))
            }
        }
    }

    fn serve_handlersocket(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        ctx: &Context<'_>,
    ) -> (usize, Step) {
        let Some((request, consumed)) = handlersocket::parse(input) else {
            return (0, Step::Incomplete);
        };
        if let Some(connection) = self.handlersocket.as_mut() {
            connection.serve(request, ctx, out);
        }
        (consumed, Step::Served(Action::Continue))
    }

    fn recover(&mut self, recovery: Recovery) {
        if let Recovery::Swallow(bytes) = recovery {
            self.swallow = bytes;
        }
    }
}

/// Whether the request at the front of `input` on `--tyrant-port` is a
/// memcached one: neither Tokyo Tyrant's binary magic nor an HTTP head.
fn memcached_on_tyrant_port(input: &[u8]) -> bool {
    input.first() != Some(&tyrant::MAGIC) && !tyrant_http::starts_request(input)
}

enum Step {
    Served(Action),
    Incomplete,
    Rejected,
    /// The batch's replies would take more than `-o read_buf_mem_limit`
    /// allows (see `reply_budget`); the request was not served.
    OutOfReplyMemory,
}
