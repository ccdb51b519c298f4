"""A small Llama 3 style tokenizer, trained locally in seconds, for tests and offline runs.

The real Llama 3 tokenizer is gated on the Hugging Face hub. This trains a byte-level BPE with the
`tokenizers` library on Tiny Shakespeare and gives it the form of Llama 3's tokenizer.json: Llama 3's
pre-tokenizer (its split pattern, then byte-level without the GPT-2 regex), every byte in the base
alphabet, the merges derived from the ranks the way they are for Llama 3's tiktoken vocabulary (every
split of a token into two tokens, ordered by the merged token's id) with ignore_merges, and the two
special tokens Llama 3 uses, <|begin_of_text|> and <|end_of_text|>, after the ordinary ids. So a
token's rank is its id, which is what the C encoder (llmc/bpe.h, bpe_init_llama3) relies on. It
writes <out_dir>/tokenizer.json, which every --tokenizer flag accepts (the directory or the file).
--delimiter endoftext gives it instead one special token, <|endoftext|>, a document delimiter without
BOS as Qwen's tokenizers have (the ordinary tokens are the same). --chat adds the chat format's special tokens
after those (pyllmc/chat.py): Llama 3's <|start_header_id|>, <|end_header_id|> and <|eot_id|>, or with
--delimiter endoftext ChatML's <|im_start|> and <|im_end|> (Qwen3's); without it the output is as before.

    python dev/data/make_test_tokenizer.py                          # -> dev/data/test_tokenizer/tokenizer.json
    python dev/data/make_test_tokenizer.py --vocab_size 1024 --out_dir /tmp/tok
    python dev/data/make_test_tokenizer.py --delimiter endoftext --out_dir /tmp/tok_eot   # <|endoftext|> = 512
    python dev/data/make_test_tokenizer.py --chat --out_dir /tmp/tok_chat   # + <|start_header_id|> = 514 ... <|eot_id|> = 516
"""

from __future__ import annotations

import sys
from pathlib import Path

from data_common import find_corpus, positive_int, read_utf8, run_script, script_parser
from pyllmc.chat import CHATML_FORMAT, LLAMA3_FORMAT
from pyllmc.families.llama3 import BOS as LLAMA3_BOS, EOT as LLAMA3_EOT
from pyllmc.token_shards import DataError, write_atomically

HERE = Path(__file__).resolve().parent
# Llama 3's pre-tokenizer split pattern (its tokenizer.json), which llmc/bpe.h implements by hand
LLAMA3_SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                        r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# --delimiter: the special tokens after the ordinary ids
SPECIAL_TOKENS = {"bos": [LLAMA3_BOS, LLAMA3_EOT], "endoftext": ["<|endoftext|>"]}
# --chat: the chat format's special tokens after those (pyllmc/chat.py: Llama 3's, or ChatML's with endoftext)
CHAT_TOKENS = {"bos": [s for s in LLAMA3_FORMAT.specials if s not in SPECIAL_TOKENS["bos"]],
               "endoftext": list(CHATML_FORMAT.specials)}
def rank_merges(vocab: dict[str, int]) -> list[tuple[str, str]]:
    """Merges that make BPE by merge rank equal BPE by token rank (= id): every split of a token into two
    tokens, ordered by the token's id, then by the ids of its two halves (how Llama 3's are derived)."""
    merges = []
    for token, rank in vocab.items():
        splits = [(token[:i], token[i:]) for i in range(1, len(token)) if token[:i] in vocab and token[i:] in vocab]
        merges += [(rank, vocab[a], vocab[b], a, b) for a, b in splits]
    return [(a, b) for *_, a, b in sorted(merges)]


def train_tokenizer(text: str, vocab_size: int, specials: list[str] = SPECIAL_TOKENS["bos"]):
    """Byte-level BPE with `vocab_size` ordinary tokens (256 bytes + merges), then the special tokens."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_SPLIT_PATTERN), "isolated"),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False, special_tokens=[])
    trained.train_from_iterator(text.split("\n\n"), trainer=trainer)
    vocab = trained.get_vocab()
    tok = Tokenizer(models.BPE(vocab=vocab, merges=rank_merges(vocab), ignore_merges=True))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    return tok


def build(corpus: Path | None, out_dir: Path, vocab_size: int, delimiter: str = "bos", chat: bool = False) -> str:
    if vocab_size < 256:
        raise DataError(f"--vocab_size {vocab_size}: byte-level BPE needs at least the 256 byte tokens")
    source = find_corpus(corpus)
    specials = SPECIAL_TOKENS[delimiter] + (CHAT_TOKENS[delimiter] if chat else [])
    tok = train_tokenizer(read_utf8(source), vocab_size, specials)
    path = write_atomically(out_dir / "tokenizer.json", lambda f: f.write(tok.to_str().encode("utf-8")))
    V = tok.get_vocab_size(with_added_tokens=True)
    named = ", ".join(f"{name} = {tok.token_to_id(name)}" for name in specials)
    return f"wrote {path}: {V} tokens, {named} (trained on {source})"


def main(argv: list[str] | None = None) -> int:
    parser = script_parser("Train a small byte-level BPE tokenizer in the Llama 3 style (for tests and offline runs).")
    parser.add_argument("--corpus", type=Path, default=None, help="training text (default: the cached Tiny Shakespeare)")
    parser.add_argument("--out_dir", type=Path, default=HERE / "test_tokenizer", help="where tokenizer.json is written")
    parser.add_argument("--vocab_size", type=positive_int, default=512, help="ordinary tokens (bytes + merges), before the special ones")
    parser.add_argument("--delimiter", choices=list(SPECIAL_TOKENS), default="bos",
                        help="bos: Llama 3's <|begin_of_text|> and <|end_of_text|>; endoftext: <|endoftext|> alone, a "
                             "document delimiter without BOS (Qwen's)")
    parser.add_argument("--chat", action="store_true",
                        help="add the chat format's special tokens after those: Llama 3's <|start_header_id|>, "
                             "<|end_header_id|>, <|eot_id|> (with --delimiter endoftext: ChatML's <|im_start|>, <|im_end|>)")
    args = parser.parse_args(argv)
    return run_script(lambda: build(args.corpus, args.out_dir, args.vocab_size, args.delimiter, args.chat))


if __name__ == "__main__":
    sys.exit(main())
