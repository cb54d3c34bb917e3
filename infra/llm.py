"""The LLM port: one chat completion that must answer a JSON object.

    ChatModel           the port: ``model``, ``complete_json(system, user, schema, name)``
    └── OpenAIChatModel any OpenAI-compatible ``/v1/chat/completions`` (OpenAI, vLLM, Ollama,
                        LiteLLM, llama.cpp's server …) through the official ``openai`` client

Structured output is asked for by JSON schema (``response_format`` type ``json_schema``, strict);
a server that refuses that gets JSON mode (``json_object``) with the schema written into the
system prompt instead, and is not asked for a schema again. The adapter never retries: the caller
owns retries and backoff (``services.ingest.extraction``), so the client runs with
``max_retries=0``. Every failure is an :class:`LLMError`.
"""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING, Any, Literal, Protocol

from domain.errors import PalimpsestError

if TYPE_CHECKING:
    from infra.settings import Settings

log = logging.getLogger(__name__)

Mode = Literal["json_schema", "json_object"]
Failure = Literal["timeout", "connection", "status", "content"]

_RETRYABLE_STATUS = frozenset({408, 409, 429})
#: What a server says when it does not know structured output by schema.
_REFUSAL = re.compile(r"response_format|json_schema|structured", re.IGNORECASE)
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL | re.IGNORECASE)


class LLMError(PalimpsestError):
    """A completion gave no JSON object. ``failure`` says why: ``timeout``, ``connection``,
    ``status`` (an HTTP error; ``status_code`` holds it) or ``content`` (an answer that is no JSON
    object, or was cut off). Retryable unless the server refused the request itself (a 4xx other
    than 408, 409 and 429): a bad key or an unknown model does not heal by asking again."""

    def __init__(self, message: str, *, failure: Failure, status_code: int | None = None,
                 retryable: bool = True) -> None:
        super().__init__(message)
        self.failure = failure
        self.status_code = status_code
        self.retryable = retryable


class ChatModel(Protocol):
    """A chat model that answers one JSON object per call."""

    model: str

    def complete_json(self, system: str, user: str, schema: dict[str, Any],
                      name: str) -> tuple[dict[str, Any], Mode]:
        """The object the model answered for ``system`` + ``user``, shaped by ``schema`` (named
        ``name``), and the mode that answered it. Raises :class:`LLMError`."""
        ...


def parse_json_object(content: str | None) -> dict[str, Any]:
    """The JSON object in a completion's text; a fenced block (```json … ```), which small local
    models like to write even in JSON mode, is unwrapped. Anything else is an ``LLMError``."""
    if not content or not content.strip():
        raise LLMError("the model answered no content", failure="content")
    fenced = _FENCE.match(content)
    text = fenced.group(1) if fenced else content
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise LLMError(f"the model's answer is not JSON: {content[:120]!r}", failure="content") from exc
    if not isinstance(value, dict):
        raise LLMError(f"the model's answer is JSON but not an object: {content[:120]!r}",
                       failure="content")
    return value


def schema_prompt(system: str, schema: dict[str, Any]) -> str:
    """The system prompt for JSON mode: the schema is written out, since the server cannot hold it."""
    return (f"{system}\n\nAnswer with one JSON object, and nothing else, that follows this JSON "
            f"schema:\n{json.dumps(schema, ensure_ascii=False)}")


class OpenAIChatModel:
    """``POST {base_url}/chat/completions`` through the ``openai`` client, temperature 0.

    ``base_url=None`` is OpenAI itself and then needs ``api_key``; a local server usually needs
    none. Each request is bounded by ``timeout`` seconds and ``max_tokens`` of answer, and tried
    once.
    """

    def __init__(self, *, model: str, base_url: str | None = None, api_key: str | None = None,
                 timeout: float = 30.0, max_tokens: int | None = None) -> None:
        import openai

        if base_url is None and not api_key:
            raise ValueError("the OpenAI chat model needs an API key (PALIMPSEST_LLM_API_KEY)")
        self.model = model
        self.max_tokens = max_tokens
        self._openai = openai
        # An explicit placeholder key: the client must not fall back to OPENAI_API_KEY from the
        # environment; settings are the one place configuration comes from.
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or "unused",
                                     timeout=timeout, max_retries=0)
        self._where = base_url or "api.openai.com"
        #: None until the server has answered (or refused) a schema; then whether it takes one.
        self._schema_ok: bool | None = None

    @property
    def mode(self) -> Mode:
        """The mode the next call asks for."""
        return "json_object" if self._schema_ok is False else "json_schema"

    def complete_json(self, system: str, user: str, schema: dict[str, Any],
                      name: str) -> tuple[dict[str, Any], Mode]:
        if self._schema_ok is not False:
            try:
                answer = self._complete(system, user, {"type": "json_schema", "json_schema": {
                    "name": name, "schema": schema, "strict": True}})
            except LLMError as error:
                if not self._refuses_schema(error):
                    raise
                return self._fallback(system, user, schema, error)
            self._schema_ok = True
            return answer, "json_schema"
        return self._complete(schema_prompt(system, schema), user, {"type": "json_object"}), "json_object"

    def _refuses_schema(self, error: LLMError) -> bool:
        """A 400/422 that names ``response_format``; or any 400 before the server ever took a schema."""
        if error.status_code not in (400, 422):
            return False
        return bool(_REFUSAL.search(str(error))) or (error.status_code == 400 and self._schema_ok is None)

    def _fallback(self, system: str, user: str, schema: dict[str, Any],
                  refusal: LLMError) -> tuple[dict[str, Any], Mode]:
        """JSON mode after a refusal. Remembered at once when the server named ``response_format``,
        else only once JSON mode has worked (the 400 may have had another cause)."""
        named = bool(_REFUSAL.search(str(refusal)))
        if named:
            self._schema_ok = False
        log.warning("%s refused structured output by schema (status %s); using JSON mode", self._where,
                    refusal.status_code)
        answer = self._complete(schema_prompt(system, schema), user, {"type": "json_object"})
        self._schema_ok = False
        return answer, "json_object"

    def _complete(self, system: str, user: str, response_format: dict[str, Any]) -> dict[str, Any]:
        openai = self._openai
        request: dict[str, Any] = {
            "model": self.model, "temperature": 0, "response_format": response_format,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        }
        if self.max_tokens is not None:
            request["max_tokens"] = self.max_tokens
        try:
            response = self._client.chat.completions.create(**request)
        except openai.APITimeoutError as exc:
            raise LLMError(f"completion at {self._where} timed out ({self.model})",
                           failure="timeout") from exc
        except openai.APIConnectionError as exc:
            raise LLMError(f"cannot reach the LLM at {self._where}: {exc}", failure="connection") from exc
        except openai.APIStatusError as exc:
            status = exc.status_code
            raise LLMError(
                f"LLM at {self._where} answered HTTP {status} ({self.model}): {exc.message}",
                failure="status", status_code=status,
                retryable=status >= 500 or status in _RETRYABLE_STATUS,
            ) from exc
        except openai.OpenAIError as exc:  # e.g. a body that is no completion
            raise LLMError(f"LLM at {self._where} failed: {exc}", failure="content") from exc
        if not response.choices:
            raise LLMError(f"LLM at {self._where} answered no choice", failure="content")
        choice = response.choices[0]
        if choice.finish_reason == "length":
            raise LLMError(f"the answer of {self.model} was cut off at its length limit", failure="content")
        return parse_json_object(choice.message.content)

    def close(self) -> None:
        self._client.close()


def create_chat_model(settings: Settings) -> OpenAIChatModel | None:
    """The chat model the settings name; None when extraction is off (no ``llm_base_url``)."""
    if not settings.llm_base_url:
        return None
    api_key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
    return OpenAIChatModel(model=settings.llm_model, base_url=settings.llm_base_url,
                           api_key=api_key, timeout=settings.llm_timeout_seconds,
                           max_tokens=settings.llm_max_tokens)
