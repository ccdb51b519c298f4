"""
Chat templates: how a conversation (a list of {"role", "content"} messages) becomes token ids and a loss mask, one
format per family (Family.chat_format), kept with its tokenizer. doc/chat.md shows each one.

    "nanochat" (GPT-2, nanochat's GPT): [<|bos|>] then per message
                 user      [<|user_start|>] enc(content) [<|user_end|>]
                 assistant [<|assistant_start|>] enc(content) [<|assistant_end|>]
               a system message's content + "\\n\\n" is prefixed to the first user message's content.
    "llama3":  [<|begin_of_text|>] then per message (system too)
                 [<|start_header_id|>] enc(role) [<|end_header_id|>] enc("\\n\\n") enc(content) [<|eot_id|>]
    "chatml":  (Qwen3) no BOS; per message (system too)
                 [<|im_start|>] enc(role + "\\n") enc(content) [<|im_end|>] enc("\\n")

enc() is the family's text encoder applied to each piece separately (special-token text inside a piece is ordinary
text), so the C encoder (llmc/bpe.h) gives the same ids. The mask is 1 on the supervised targets: the content of every
assistant message and the token that ends it, 0 elsewhere. The generation prompt is the assistant's header (the pieces
before its content); the answer ends at the assistant's end token.

The special tokens are found by their strings: in GPT-2's vocabulary at fixed ids (<|bos|> is <|endoftext|> 50256, the
four chat tokens 50257..50260: families/gpt2.py's CHAT_TOKENS), in a tokenizer.json among its added tokens. A problem
is a DataError with a one-line message (a conversation's names the message at fault; the caller adds the file and
line). No side effects on import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from pyllmc.families.gpt2 import CHAT_TOKENS as GPT2_CHAT_TOKENS, EOT as GPT2_EOT, VOCAB_SIZE as GPT2_VOCAB_SIZE
from pyllmc.token_shards import DataError

ROLES = ("system", "user", "assistant")
Encode = Callable[[str], list[int]]


@dataclass(frozen=True)
class ChatFormat:
    """One chat template as data. A piece is a special token's string when it is one of `specials`, else text (with
    "{role}" replaced by the message's role) that is encoded."""

    name: str
    specials: tuple[str, ...]  # the special tokens it needs, looked up in the vocabulary by their strings
    begin: tuple[str, ...]  # the pieces that open every conversation
    headers: Mapping[str, tuple[str, ...]]  # role -> the pieces before its content (a role without one: not its own message)
    ends: Mapping[str, str]  # role -> the special token after its content
    after_end: str  # text after each message's end token
    system_joins_first_user: bool  # the system message is no message of its own: content + "\n\n" starts the first user's

    def pieces_before(self, role: str) -> tuple[str, ...]:
        return tuple(piece.replace("{role}", role) if piece not in self.specials else piece for piece in self.headers[role])


NANOCHAT_FORMAT = ChatFormat(
    name="nanochat",
    specials=("<|bos|>", *GPT2_CHAT_TOKENS),
    begin=("<|bos|>",),
    headers={"user": ("<|user_start|>",), "assistant": ("<|assistant_start|>",)},
    ends={"user": "<|user_end|>", "assistant": "<|assistant_end|>"},
    after_end="",
    system_joins_first_user=True,
)
LLAMA3_HEADER = ("<|start_header_id|>", "{role}", "<|end_header_id|>", "\n\n")
LLAMA3_FORMAT = ChatFormat(
    name="llama3",
    specials=("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
    begin=("<|begin_of_text|>",),
    headers={role: LLAMA3_HEADER for role in ROLES},
    ends={role: "<|eot_id|>" for role in ROLES},
    after_end="",
    system_joins_first_user=False,
)
CHATML_FORMAT = ChatFormat(
    name="chatml",
    specials=("<|im_start|>", "<|im_end|>"),
    begin=(),
    headers={role: ("<|im_start|>", "{role}\n") for role in ROLES},
    ends={role: "<|im_end|>" for role in ROLES},
    after_end="\n",
    system_joins_first_user=False,
)
CHAT_FORMATS: dict[str, ChatFormat] = {f.name: f for f in (NANOCHAT_FORMAT, LLAMA3_FORMAT, CHATML_FORMAT)}

# GPT-2's vocabulary: nanochat's tokens at fixed ids (the chat tokenizer file gpt2_chat_tokenizer.bin holds them)
GPT2_CHAT_IDS: dict[str, int] = {"<|bos|>": GPT2_EOT, **{s: GPT2_VOCAB_SIZE + i for i, s in enumerate(GPT2_CHAT_TOKENS)}}


def chat_format(name: str) -> ChatFormat:
    if name not in CHAT_FORMATS:
        raise DataError(f"unknown chat format {name!r}, expected one of {', '.join(CHAT_FORMATS)}")
    return CHAT_FORMATS[name]


def added_token_ids(tokenizer: Any) -> dict[str, int]:
    """A `tokenizers` Tokenizer's added tokens (those of its tokenizer.json's "added_tokens"): string -> id."""
    return {token.content: i for i, token in tokenizer.get_added_tokens_decoder().items()}


def format_of_added_tokens(added: Mapping[str, int], source: str) -> ChatFormat:
    """The chat format whose special tokens a tokenizer.json has among its added tokens (ChatML, Llama 3, nanochat's, in
    that order when it has several); DataError when it has none of them."""
    for fmt in (CHATML_FORMAT, LLAMA3_FORMAT, NANOCHAT_FORMAT):
        if all(s in added for s in fmt.specials):
            return fmt
    raise DataError(f"{source}: the tokenizer has no chat tokens (no chat format finds all of its special tokens "
                    f"among its added tokens: {'; '.join(f'{f.name}: ' + ' '.join(f.specials) for f in CHAT_FORMATS.values())})")


def special_ids(fmt: ChatFormat, vocabulary: Mapping[str, int], source: str) -> dict[str, int]:
    """fmt's special tokens' ids in `vocabulary` (string -> id); DataError naming the first one it lacks."""
    missing = [s for s in fmt.specials if s not in vocabulary]
    if missing:
        raise DataError(f"{source}: the tokenizer has no {missing[0]} token, which the {fmt.name} chat format needs")
    return {s: int(vocabulary[s]) for s in fmt.specials}


# ----------------------------------------------------------------------------- conversations


def check_conversation(messages: Any, for_training: bool = True) -> list[dict[str, str]]:
    """The messages as [{"role", "content"}] when they make a conversation: a non-empty list, each role system, user
    or assistant and each content a string, a system message only first, then user and assistant turns alternating
    from a user's, the last one the assistant's when for_training (else the user's may be last: a prompt). DataError
    with a one-line reason naming the message (1-based) otherwise."""
    if not isinstance(messages, list):
        raise DataError(f"'messages' must be a list of messages, got {type(messages).__name__}")
    if not messages:
        raise DataError("empty conversation (no messages)")
    checked = []
    for n, message in enumerate(messages, 1):
        if not isinstance(message, dict):
            raise DataError(f"message {n}: not an object with 'role' and 'content'")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise DataError(f"message {n}: unknown role {role!r} (expected one of {', '.join(ROLES)})")
        if not isinstance(content, str):
            raise DataError(f"message {n}: 'content' must be a string, got {type(content).__name__}")
        if role == "system" and n != 1:
            raise DataError(f"message {n}: a system message may only be the first")
        previous = checked[-1]["role"] if checked else "system"
        if role == previous and role != "system":
            raise DataError(f"message {n}: two {role} turns in a row")
        if role == "assistant" and previous == "system":
            raise DataError(f"message {n}: the conversation must start with a user turn, not an assistant turn")
        checked.append({"role": role, "content": content})
    last = checked[-1]["role"]
    if last == "system":
        raise DataError("a conversation with no user turn")
    if for_training and last != "assistant":
        raise DataError(f"message {len(checked)}: the conversation must end with an assistant turn")
    return checked


@dataclass(frozen=True)
class ChatTemplate:
    """A chat format with its tokenizer: the special tokens' ids and the text encoder (enc())."""

    fmt: ChatFormat
    ids: Mapping[str, int]  # every special token of fmt -> its id
    encode: Encode = field(repr=False)

    def _piece(self, piece: str) -> list[int]:
        return [self.ids[piece]] if piece in self.fmt.specials else self.encode(piece)

    def _pieces(self, pieces: Sequence[str]) -> list[int]:
        return [i for piece in pieces for i in self._piece(piece)]

    @property
    def end_id(self) -> int:
        """The token that ends an assistant's answer."""
        return self.ids[self.fmt.ends["assistant"]]

    def generation_prompt(self) -> list[int]:
        """What follows a conversation for the model to answer: the assistant's header."""
        return self._pieces(self.fmt.pieces_before("assistant"))

    def render(self, messages: Any, for_training: bool = True) -> tuple[list[int], list[int]]:
        """(ids, mask) of a conversation (check_conversation's rules): mask[i] = 1 when ids[i] is a supervised target,
        the content of an assistant message or its end token."""
        conversation = check_conversation(messages, for_training)
        if self.fmt.system_joins_first_user and conversation[0]["role"] == "system":
            system, first_user = conversation[0], conversation[1]
            conversation = [{"role": "user", "content": system["content"] + "\n\n" + first_user["content"]},
                            *conversation[2:]]
        ids = self._pieces(self.fmt.begin)
        mask = [0] * len(ids)
        for message in conversation:
            role = message["role"]
            supervised = int(role == "assistant")
            before = self._pieces(self.fmt.pieces_before(role))
            content = self.encode(message["content"]) + [self.ids[self.fmt.ends[role]]]
            after = self.encode(self.fmt.after_end) if self.fmt.after_end else []
            ids += before + content + after
            mask += [0] * len(before) + [supervised] * len(content) + [0] * len(after)
        return ids, mask

    def render_prompt(self, messages: Any) -> list[int]:
        """The ids of a conversation that ends with a user turn, then the generation prompt: what a model answers."""
        conversation = check_conversation(messages, for_training=False)
        if conversation[-1]["role"] != "user":
            raise DataError(f"message {len(conversation)}: a prompt must end with a user turn")
        return self.render(conversation, for_training=False)[0] + self.generation_prompt()


def gpt2_template(encode: Encode) -> ChatTemplate:
    """GPT-2's vocabulary (tiktoken's gpt2 encode_ordinary) with nanochat's tokens at their fixed ids."""
    return ChatTemplate(NANOCHAT_FORMAT, GPT2_CHAT_IDS, encode)


def tokenizer_json_template(tokenizer: Any, encode: Encode, source: str, fmt: ChatFormat | None = None) -> ChatTemplate:
    """A tokenizer.json's template (`tokenizer`: its `tokenizers` Tokenizer; encode: plain text to ids): fmt, or the
    format its added tokens have (format_of_added_tokens); their ids by their strings."""
    added = added_token_ids(tokenizer)
    fmt = fmt or format_of_added_tokens(added, source)
    return ChatTemplate(fmt, special_ids(fmt, added, source), encode)
