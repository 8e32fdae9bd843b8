"""One client connection: frames in, requests dispatched concurrently, responses out in order.

Kafka clients pipeline (librdkafka keeps up to 5 produce requests in flight per connection), so
requests are handled concurrently while answers leave in request order. Requests that change
state where order matters (produce, share acknowledgements, offset commits) also take effect in
request order: their handlers route and send their parts while holding the connection's turn
(`in_request_order`), one request after the other, and wait for the answers after passing the
turn on. Malformed bytes close this connection and nothing else; domain errors travel inside
responses.

On a listener with security (see actors/security/): TLS is the server's (asyncio's
ssl), the principal of an SSL connection is its client certificate's mapped subject, and on a
SASL listener every request passes the connection's `ConnectionSession` in arrival order before it
is dispatched: SaslHandshake and SaslAuthenticate are answered here, a request the session does
not admit closes the connection, a failed login is answered after
`connection.failed.authentication.delay.ms` (this connection stops reading; others go on), then closed.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import struct
import time
from typing import Any, Awaitable, Callable, Mapping

from protocol.framing import FrameDecoder, FrameTooLarge, MalformedFrame
from protocol.errors import MalformedMessage
from protocol.headers import decode_request_header, encode_response
from actors.gateway.file_region import FileRegion, write_frame
from actors.security.principal import ANONYMOUS, KafkaPrincipal, NoMatchingRule, principal_for
from actors.security.session import (API_SASL_HANDSHAKE, Action, AuthenticateAnswer, ConnectionSession,
                                     HandshakeAnswer)

log = logging.getLogger("kray.gateway")

READ_CHUNK_BYTES = 256 * 1024
INFLIGHT_REQUESTS_PER_CONNECTION_MAX = 16
COALESCED_ANSWER_BYTES_MAX = 1024 * 1024  # answers ready together are sent together up to this size


class CloseConnection(Exception):
    """Raised by a handler when the only right answer is to drop the connection."""


class ClientConnection:
    """What handlers may know of the connection a request came on: an id, the listener it came
    in on (Metadata answers with that listener's addresses), who it is (its principal, for the
    authorizer), and cleanups to run when it closes (share sessions release what they hold)."""
    _ids = itertools.count(1)

    def __init__(self, peer, abort: Callable[[], None] | None = None, *, listener_name: str | None = None,
                 principal: KafkaPrincipal = ANONYMOUS):
        self.connection_id = next(self._ids)
        self.peer = peer
        self.listener_name = listener_name  # None: a front end started without listener settings (tests)
        self.principal = principal
        self.on_close: list[Callable[[], Awaitable[None]]] = []
        self.turn = asyncio.Lock()  # FIFO: waiters get it in the order they asked
        self.broken: str | None = None
        self._abort = abort
        self.muted_until = 0.0  # loop time before which no more of the client's bytes are read (a quota's throttle)
        # a client quota applies to this connection's client: its requests are taken one at a time, each once the
        # one before it is answered, and none while muted, as Kafka's socket server takes every connection's (else
        # a client that pipelines sends a window's worth more before its first throttle is known)
        self.quota_bound = False

    @property
    def client_host(self) -> str:
        """The client's address as Kafka's group describes show a member's (Java's InetAddress: "/127.0.0.1")."""
        return "/" + str(self.peer[0]) if self.peer else ""

    def mute_for(self, throttle_ms: int) -> None:
        """Read nothing more from the client for `throttle_ms` (Kafka mutes a throttled client's channel, KIP-219)."""
        loop_time = asyncio.get_running_loop().time()
        self.muted_until = max(self.muted_until, loop_time + throttle_ms / 1000)

    @contextlib.asynccontextmanager
    async def in_request_order(self):
        """Held while a request routes and sends what changes state: the requests of this
        connection do so one after the other, in the order they arrived."""
        async with self.turn:
            if self.broken is not None:
                raise CloseConnection(self.broken)
            yield

    def abort(self, reason: str) -> None:
        """A request's outcome is unknown (the data path failed after it may have been applied):
        close the connection at once, as a failed Kafka broker's connection closes, so that no
        later request of it is applied either. The client retries what was in flight."""
        if self.broken is None:
            self.broken = reason
            log.warning("closing connection from %s: %s", self.peer, reason)
            if self._abort is not None:
                self._abort()

    async def closed(self) -> None:
        for cleanup in self.on_close:
            try:
                await cleanup()
            except Exception:
                log.exception("cleanup after closing a connection from %s failed", self.peer)


def in_request_order(connection: ClientConnection | None):
    """`connection.in_request_order()`, or nothing where a handler is called without a connection."""
    return connection.in_request_order() if connection is not None else contextlib.nullcontext()


# A dispatcher takes one frame body and returns an awaitable of the response frame (or None: no answer).
Dispatch = Callable[[memoryview, ClientConnection], Awaitable[bytes | None]]


_API_KEY = struct.Struct(">h")


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def _tls_principal(security, writer) -> KafkaPrincipal:
    """ANONYMOUS, or on an SSL listener with a client certificate its mapped subject (NoMatchingRule
    when no rule maps it: Kafka fails that client's authentication)."""
    if security is None or security.protocol.value != "SSL":
        return ANONYMOUS  # SASL_SSL: the SASL login names it
    certificate = writer.get_extra_info("peercert") or {}
    return principal_for("SSL", peer_subject=certificate.get("subject"), mapper=security.principal_mapper)


def new_session(security, credentials: Callable[[Any], Mapping] | None = None) -> ConnectionSession:
    """A SASL connection's session: PLAIN against the listener's users, SCRAM against `credentials`
    (ScramMechanism -> user -> ScramCredential, the broker's current metadata; none: no SCRAM user)."""
    from actors.security.plain import PLAIN_MECHANISM, PlainServer
    from actors.security.scram import ScramMechanism, ScramServer
    factories = {PLAIN_MECHANISM: lambda: PlainServer(security.plain_users)}
    for mechanism in ScramMechanism:
        factories[mechanism.mechanism_name] = (
            lambda m=mechanism: ScramServer(m, credentials(m) if credentials is not None else {}))
    return ConnectionSession(sasl=True, mechanisms={m: factories[m] for m in security.mechanisms if m in factories},
                             enabled=security.mechanisms, reauth_ms=security.reauth_ms)


class _Gate:
    """Steps the connection's session for each frame in arrival order: returns "dispatch", a
    response frame to send in turn, or a _Refusal."""

    def __init__(self, session: ConnectionSession, connection: ClientConnection, delay_s: float):
        self.session, self.connection, self.delay_s = session, connection, delay_s

    def __call__(self, body: memoryview) -> Any:
        session = self.session
        if session.expects_raw_token:  # after SaslHandshake v0: a token without Kafka headers
            answer = session.authenticate(bytes(body), _now_ms())
            if answer.close:
                return _Refusal(f"SASL authentication failed: {answer.log_reason}", None, self.delay_s)
            if session.authenticated:  # SCRAM takes two tokens: the first one answers a challenge
                self._authenticated()
            return struct.pack(">i", len(answer.auth_bytes)) + answer.auth_bytes
        if len(body) < 2:
            return _Refusal("a request shorter than its header", None, 0.0)
        admission = session.admit(_API_KEY.unpack_from(body, 0)[0], _now_ms())  # the header's first field
        if admission.action is Action.SERVE:
            return "dispatch"
        if admission.action is Action.CLOSE:
            return _Refusal(admission.reason, None, 0.0)
        header, offset = decode_request_header(body)
        from protocol.messages import (SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
                                       SaslHandshakeResponse)
        spec = SaslHandshakeRequest if header.api_key == API_SASL_HANDSHAKE else SaslAuthenticateRequest
        if not spec.MIN_VERSION <= header.api_version <= spec.MAX_VERSION:
            return _Refusal(f"api key {header.api_key} v{header.api_version} is not supported", None, 0.0)
        request = spec.decode(body[offset:], header.api_version)
        answer: HandshakeAnswer | AuthenticateAnswer
        if spec is SaslHandshakeRequest:
            answer = session.handshake(request.mechanism, header.api_version)
            response = SaslHandshakeResponse(error_code=answer.error_code, mechanisms=answer.mechanisms)
            reason = f"SASL mechanism {request.mechanism!r} refused (enabled: {answer.mechanisms})"
        else:
            answer = session.authenticate(request.auth_bytes or b"", _now_ms())
            response = SaslAuthenticateResponse(error_code=answer.error_code, error_message=answer.error_message,
                                                auth_bytes=answer.auth_bytes,
                                                session_lifetime_ms=answer.session_lifetime_ms)
            reason = f"SASL authentication failed: {answer.log_reason}"
            if not answer.close and session.authenticated:
                self._authenticated()
        frame = encode_response(header.api_key, header.api_version, header.correlation_id,
                                response.encode(header.api_version))
        return _Refusal(reason, frame, self.delay_s) if answer.close else frame

    def _authenticated(self) -> None:
        self.connection.principal = self.session.principal
        log.debug("connection from %s authenticated as %s", self.connection.peer, self.session.principal)


class _Refusal:
    """Close the connection: after `delay_s` (failed authentication) and the answer, if any."""

    def __init__(self, reason: str, frame: bytes | None, delay_s: float):
        self.reason, self.frame, self.delay_s = reason, frame, delay_s

    async def answer(self) -> bytes | None:
        if self.delay_s > 0:
            await asyncio.sleep(self.delay_s)
        return self.frame


def _done(frame: bytes) -> asyncio.Future:
    future = asyncio.get_running_loop().create_future()
    future.set_result(frame)
    return future


async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, dispatch: Dispatch,
                           *, frame_bytes_max: int, idle_timeout_s: float, security=None,
                           credentials: Callable[[Any], Mapping] | None = None) -> None:
    """Serve one client connection; `security` is its listener's ListenerSecurity (None: PLAINTEXT
    without listener settings, as in tests); `credentials` gives SCRAM logins their
    users (see new_session)."""
    peer = writer.get_extra_info("peername")
    try:
        principal = _tls_principal(security, writer)
    except NoMatchingRule as e:
        log.warning("closing connection from %s: SSL authentication failed: %s", peer, e)
        writer.transport.abort()
        return
    connection = ClientConnection(peer, writer.transport.abort, principal=principal,
                                  listener_name=security.listener.name if security is not None else None)
    session = new_session(security, credentials) if security is not None and security.protocol.uses_sasl else None
    gate = _Gate(session, connection, security.failed_auth_delay_ms / 1000) if session is not None else None
    decoder = FrameDecoder(frame_bytes_max)
    pending: asyncio.Queue[asyncio.Task | None] = asyncio.Queue(INFLIGHT_REQUESTS_PER_CONNECTION_MAX)
    responder = asyncio.create_task(_respond_in_order(pending, writer))
    last: list = [None]  # the request dispatched last (a quota-bound connection waits for it)
    quota_applies = getattr(dispatch, "quota_applies", None)

    def dispatched(body: bytes) -> asyncio.Task:
        last[0] = asyncio.create_task(dispatch(body, connection))
        return last[0]
    try:
        while not responder.done():
            timeout_s = idle_timeout_s
            if session is not None and session.expires_at_ms is not None and session.authenticated:
                timeout_s = min(timeout_s, max(0.0, (session.expires_at_ms - _now_ms()) / 1000) + 0.001)
            try:
                data = await asyncio.wait_for(reader.read(READ_CHUNK_BYTES), timeout_s)
            except asyncio.TimeoutError:
                if session is not None and session.authenticated and session.expired(_now_ms()):
                    log.info("closing connection from %s: its SASL session expired without re-authentication", peer)
                else:
                    log.info("closing idle connection from %s", peer)
                break
            if not data:
                break
            # a quota's throttle mutes the connection: what the client sent meanwhile waits (and, as the reads
            # stop, so does the client)
            muted_s = connection.muted_until - asyncio.get_running_loop().time()
            if muted_s > 0:
                await asyncio.sleep(muted_s)
            try:
                frames = decoder.feed(data)
            except (FrameTooLarge, MalformedFrame) as e:
                log.warning("closing connection from %s: %s", peer, e)
                break
            refusal = None
            for body in frames:
                if not connection.quota_bound and quota_applies is not None and quota_applies(body, connection):
                    connection.quota_bound = True
                if connection.quota_bound:
                    await _quota_turn(connection, last[0])
                if gate is None:
                    await pending.put(dispatched(body))
                    continue
                try:
                    step = gate(body)
                except MalformedMessage as e:
                    step = _Refusal(str(e), None, 0.0)
                if isinstance(step, _Refusal):
                    refusal = step
                    break
                await pending.put(dispatched(body) if step == "dispatch" else _done(step))
            if refusal is not None:  # stop reading; answer (after the delay) what came before, then close
                log.warning("closing connection from %s: %s", peer, refusal.reason)
                await pending.put(asyncio.create_task(refusal.answer()))
                break
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        if not responder.done():
            await pending.put(None)
            try:
                await responder
            except Exception:
                pass
        writer.close()
        try:
            await writer.wait_closed()
        except Exception:
            pass
        await connection.closed()


async def _quota_turn(connection: ClientConnection, previous: asyncio.Task | None) -> None:
    """A quota-bound connection's next request: once the one before it is answered, and after any mute."""
    if previous is not None and not previous.done():
        await asyncio.wait([previous])
    muted_s = connection.muted_until - asyncio.get_running_loop().time()
    if muted_s > 0:
        await asyncio.sleep(muted_s)


async def _respond_in_order(pending: asyncio.Queue, writer: asyncio.StreamWriter) -> None:
    """Write the answers in request order. Answers that are ready one after the other (a client
    pipelines its requests) go out in one send, not one each; an answer that sends records from a
    segment file goes out as it is."""
    ready: list = []  # byte chunks of answers not written yet: every one before the next pending
    ready_bytes = 0
    task = None
    try:
        task = await pending.get()
        while task is not None:
            try:
                frame = await task
            except (CloseConnection, MalformedMessage) as e:
                log.warning("closing connection from %s: %s", writer.get_extra_info("peername"), e)
                _cancel_rest(pending)
                writer.transport.abort()
                return
            except Exception:
                log.exception("unexpected error handling a request; closing the connection")
                _cancel_rest(pending)
                writer.transport.abort()
                return
            if frame is not None:
                if isinstance(frame, list) and any(isinstance(c, FileRegion) for c in frame):
                    ready_bytes = await _send_ready(writer, ready)
                    await write_frame(writer, frame)
                else:
                    chunks = frame if isinstance(frame, list) else [frame]
                    ready.extend(chunks)
                    ready_bytes += sum(len(c) for c in chunks)
                    if ready_bytes >= COALESCED_ANSWER_BYTES_MAX:
                        ready_bytes = await _send_ready(writer, ready)
            try:
                task = pending.get_nowait()
            except asyncio.QueueEmpty:  # nothing more is answered yet: send what is
                ready_bytes = await _send_ready(writer, ready)
                task = await pending.get()
                continue
            if task is not None and not task.done():  # don't hold answers back while it runs
                ready_bytes = await _send_ready(writer, ready)
        await _send_ready(writer, ready)
    except (ConnectionError, OSError) as e:
        log.warning("closing connection to %s: %s", writer.get_extra_info("peername"), e)
        if task is not None and not task.done():
            task.cancel()
        _cancel_rest(pending)
        writer.transport.abort()


async def _send_ready(writer: asyncio.StreamWriter, ready: list) -> int:
    """Write the chunks of the answers in `ready` in one send; empty `ready`; 0 (its new size)."""
    if ready:
        writer.write(ready[0] if len(ready) == 1 else b"".join(ready))
        ready.clear()
        await writer.drain()
    return 0


def _cancel_rest(pending: asyncio.Queue) -> None:
    while not pending.empty():
        task = pending.get_nowait()
        if task is not None:
            task.cancel()
