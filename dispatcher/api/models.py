"""Request bodies. Strict types (no coercion), unknown fields refused."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from dispatcher.domain.phone import is_e164


def _e164(value: str) -> str:
    if not is_e164(value):
        raise ValueError("must be a phone number in E.164 form, like +15555550123")
    return value


def _text(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or only spaces")
    return value


E164 = Annotated[str, AfterValidator(_e164)]
MessageText = Annotated[str, Field(min_length=1, max_length=1600), AfterValidator(_text)]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


class SendMessage(Body):
    from_: str = Field(alias="from", min_length=1, max_length=64)
    to: E164
    text: MessageText


class SetConversationStatus(Body):
    status: Literal["open", "done"]


class Media(Body):
    contentType: str = Field(min_length=1, max_length=255)
    url: str = Field(min_length=1, max_length=2048)


class InboundMessage(Body):
    from_: E164 = Field(alias="from")
    to: E164
    text: Annotated[str, Field(max_length=1600)]
    media: list[Media] = Field(default_factory=list, max_length=10)


class InboundCall(Body):
    from_: E164 = Field(alias="from")
    to: E164
    status: Literal["ringing", "answered", "completed", "missed", "forwarded"]
    durationSeconds: int | None = Field(default=None, ge=0, le=7 * 86400)
