"""The API table: every generated request/response pair by API key."""

from dataclasses import dataclass

from protocol import messages
from protocol.codec import Message


@dataclass(frozen=True, slots=True)
class ApiSpec:
    key: int
    name: str
    request: type[Message]
    response: type[Message]
    min_version: int
    max_version: int
    flexible_min: int | None
    latest_version_unstable: bool

    def is_flexible(self, version: int) -> bool:
        return self.flexible_min is not None and version >= self.flexible_min


def _build() -> dict[int, ApiSpec]:
    table = {}
    for name, request in vars(messages).items():
        if not (name.endswith("Request") and isinstance(request, type) and issubclass(request, Message)):
            continue
        response = getattr(messages, name[:-len("Request")] + "Response")
        table[request.API_KEY] = ApiSpec(
            key=request.API_KEY, name=name[:-len("Request")], request=request, response=response,
            min_version=request.MIN_VERSION, max_version=request.MAX_VERSION, flexible_min=request.FLEXIBLE_MIN,
            latest_version_unstable=request.LATEST_VERSION_UNSTABLE)
    return dict(sorted(table.items()))


API_BY_KEY: dict[int, ApiSpec] = _build()
