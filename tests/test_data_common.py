"""token_shards.py and dev/data/data_common.py: shard and eval formats (writers, validating readers) and the download
helper."""

from __future__ import annotations

import functools
import http.server
import socket
import sys
import threading
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "dev" / "data"))

from data_common import DownloadError, download_file, read_evalfile, write_evalfile  # noqa: E402
from pyllmc.token_shards import DataError, DataFormatError, read_datafile, write_atomically, write_datafile  # noqa: E402


def header_of(path: Path) -> np.ndarray:
    return np.frombuffer(path.read_bytes()[:1024], dtype="<i4")


def write_raw(path: Path, header_values: list[int], body: bytes) -> Path:
    header = np.zeros(256, dtype="<i4")
    header[: len(header_values)] = header_values
    path.write_bytes(header.tobytes() + body)
    return path


# ----------------------------------------------------------------------------- token shards


def test_gpt2_shard_round_trips_with_llmc_header(tmp_path: Path) -> None:
    tokens = np.random.default_rng(0).integers(0, 50257, size=1000)
    tokens[0], tokens[1] = 0, 50256
    path = write_datafile(tmp_path / "s.bin", tokens.tolist())
    assert list(header_of(path)[:3]) == [20240520, 1, 1000]
    assert not header_of(path)[3:].any()
    assert path.stat().st_size == 1024 + 2 * 1000
    back = read_datafile(path)
    assert back.dtype == np.uint16
    np.testing.assert_array_equal(back, tokens)


def test_llama3_shard_round_trips_as_uint32(tmp_path: Path) -> None:
    tokens = np.array([0, 128000, 128255, 70000, 5], dtype=np.int64)
    path = write_datafile(tmp_path / "l.bin", tokens, model_desc="llama-3")
    assert list(header_of(path)[:3]) == [20240801, 7, 5]
    assert path.stat().st_size == 1024 + 4 * 5
    back = read_datafile(path)
    assert back.dtype == np.uint32
    np.testing.assert_array_equal(back, tokens)


def test_empty_shard_round_trips(tmp_path: Path) -> None:
    path = write_datafile(tmp_path / "e.bin", [])
    assert path.stat().st_size == 1024
    assert len(read_datafile(path)) == 0


def test_write_datafile_leaves_no_temporary_file(tmp_path: Path) -> None:
    write_datafile(tmp_path / "s.bin", [1, 2, 3])
    assert [p.name for p in tmp_path.iterdir()] == ["s.bin"]


@pytest.mark.parametrize(
    ("model_desc", "bad", "message"),
    [
        ("gpt-2", 50257, "token id 50257 at position 2 >= vocab size 50257"),
        ("gpt-2", 70000, "token id 70000 at position 2 >= vocab size 50257"),
        ("gpt-2", -1, "token id -1 at position 2 is negative"),
        ("llama-3", 128256, "token id 128256 at position 2 >= vocab size 128256"),
    ],
)
def test_write_datafile_rejects_out_of_range_tokens(tmp_path: Path, model_desc: str, bad: int, message: str) -> None:
    with pytest.raises(DataFormatError, match=message):
        write_datafile(tmp_path / "s.bin", [1, 2, bad, 3], model_desc=model_desc)
    assert list(tmp_path.iterdir()) == []


BAD_SHARDS = [  # (what is wrong, header values, body, the error it gives)
    ("wrong magic", [123, 1, 2], b"\0" * 4, r"bad\.bin: wrong magic 123, expected 20240520 or 20240801 \(not a token shard\)"),
    ("wrong version", [20240520, 3, 2], b"\0" * 4, r"bad\.bin: wrong version 3 for magic 20240520 \(gpt-2\), expected 1"),
    ("truncated body", [20240520, 1, 1000], b"\0" * 1500,
     r"bad\.bin: truncated: header says 1000 tokens \(2000 bytes\) but 1500 bytes follow the header"),
    ("trailing bytes", [20240801, 7, 3], b"\0" * 16, r"bad\.bin: trailing data: header says 3 tokens \(12 bytes\) but 16 bytes"),
]


@pytest.mark.parametrize("header, body, expected", [c[1:] for c in BAD_SHARDS], ids=[c[0] for c in BAD_SHARDS])
def test_read_datafile_rejects_a_bad_shard_naming_the_file(tmp_path: Path, header: list[int], body: bytes,
                                                           expected: str) -> None:
    with pytest.raises(DataFormatError, match=expected):
        read_datafile(write_raw(tmp_path / "bad.bin", header, body))


def test_read_datafile_names_the_kind_of_file_it_got(tmp_path: Path) -> None:
    path = write_evalfile(tmp_path / "eval.bin", [])
    with pytest.raises(DataFormatError, match=r"wrong magic 20240522, .*this is an eval file, not a token shard"):
        read_datafile(path)


def test_read_datafile_rejects_file_shorter_than_header(tmp_path: Path) -> None:
    path = tmp_path / "short.bin"
    path.write_bytes(b"\0" * 10)
    with pytest.raises(DataFormatError, match=r"short\.bin: truncated: 10 bytes, shorter than the 1024-byte header"):
        read_datafile(path)


def test_read_datafile_rejects_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match=r"nope\.bin: no such file"):
        read_datafile(tmp_path / "nope.bin")


def test_read_datafile_rejects_token_beyond_vocab(tmp_path: Path) -> None:
    tokens = np.zeros(20, dtype="<u2")
    tokens[17] = 50300
    path = write_raw(tmp_path / "o.bin", [20240520, 1, 20], tokens.tobytes())
    with pytest.raises(DataFormatError, match=r"o\.bin: token id 50300 at position 17 >= vocab size 50257"):
        read_datafile(path)


def test_read_datafile_checks_a_given_vocab_size(tmp_path: Path) -> None:
    path = write_datafile(tmp_path / "s.bin", [1, 99, 100])
    with pytest.raises(DataFormatError, match="token id 100 at position 2 >= vocab size 100"):
        read_datafile(path, vocab_size=100)
    assert read_datafile(path, vocab_size=101).tolist() == [1, 99, 100]


def test_data_format_error_is_a_value_error() -> None:
    assert issubclass(DataFormatError, ValueError)


# ----------------------------------------------------------------------------- eval files

EXAMPLES = [
    {"label": 2, "ctx_tokens": [10, 11], "ending_tokens": [[1], [2, 3], [4], [5, 6, 7]]},
    {"label": 0, "ctx_tokens": [50256, 0, 9, 8, 7], "ending_tokens": [[1, 2, 3, 4], [5], [6], [7]]},
    {"label": 3, "ctx_tokens": [42], "ending_tokens": [[1], [2], [3], [4]]},
]


def test_evalfile_layout_is_byte_exact(tmp_path: Path) -> None:
    path = write_evalfile(tmp_path / "e.bin", EXAMPLES[:1])
    record = [65535, 38, 0, 2, 4, 2, 10, 11, 1, 1, 2, 2, 3, 1, 4, 3, 5, 6, 7]
    assert list(header_of(path)[:4]) == [20240522, 1, 1, 38]
    assert np.frombuffer(path.read_bytes()[1024:], dtype="<u2").tolist() == record


def test_evalfile_round_trips(tmp_path: Path) -> None:
    path = write_evalfile(tmp_path / "e.bin", EXAMPLES)
    assert list(header_of(path)[:4]) == [20240522, 1, 3, 44]
    back = read_evalfile(path)
    assert [ex["index"] for ex in back] == [0, 1, 2]
    for original, read in zip(EXAMPLES, back):
        assert read["label"] == original["label"]
        assert read["ctx_tokens"] == original["ctx_tokens"]
        assert read["ending_tokens"] == original["ending_tokens"]


def test_write_evalfile_rejects_wrong_number_of_completions(tmp_path: Path) -> None:
    bad = [{"label": 0, "ctx_tokens": [1], "ending_tokens": [[1], [2], [3]]}]
    with pytest.raises(DataFormatError, match="example 0: 3 completions, expected 4"):
        write_evalfile(tmp_path / "e.bin", bad)
    assert list(tmp_path.iterdir()) == []


def test_write_evalfile_rejects_label_out_of_range(tmp_path: Path) -> None:
    bad = [EXAMPLES[0], {"label": 4, "ctx_tokens": [1], "ending_tokens": [[1], [2], [3], [4]]}]
    with pytest.raises(DataFormatError, match=r"example 1: label 4 is not in 0\.\.3"):
        write_evalfile(tmp_path / "e.bin", bad)


def eval_body(path: Path) -> list[int]:
    return np.frombuffer(path.read_bytes()[1024:], dtype="<u2").tolist()


def rewrite_eval(path: Path, header: list[int], body: list[int]) -> Path:
    return write_raw(path, header, np.array(body, dtype="<u2").tobytes())


def corrupt(tmp_path: Path, change: Callable[[list[int], list[int]], None]) -> Path:
    path = write_evalfile(tmp_path / "e.bin", EXAMPLES)
    header = header_of(path)[:4].tolist()
    body = eval_body(path)
    change(header, body)
    return rewrite_eval(path, header, body)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda h, b: h.__setitem__(0, 20240520), r"wrong magic 20240520, expected 20240522 \(not an eval file\)"),
        (lambda h, b: h.__setitem__(1, 2), r"wrong version 2 for magic 20240522 \(eval file\), expected 1"),
        (lambda h, b: b.pop(), r"truncated: header says 3 examples but the data ends in example 2 \(completion 3 tokens\)"),
        (lambda h, b: h.__setitem__(2, 4), r"truncated: header says 4 examples but the data ends in example 3 \(start marker\)"),
        (lambda h, b: b.__setitem__(0, 7), r"example 0: start marker 7 at byte 1024, expected 65535"),
        (lambda h, b: b.__setitem__(1, 40), r"example 0: record length field says 40 bytes but the record is 38"),
        (lambda h, b: b.__setitem__(2, 5), r"example 0: example index field says 5"),
        (lambda h, b: b.__setitem__(3, 4), r"example 0: label 4 >= number of completions 4"),
        (lambda h, b: b.__setitem__(4, 3), r"example 0: 3 completions, expected 4"),
        (lambda h, b: b.__setitem__(6, 60000), r"example 0 context: token id 60000 at position 0 >= vocab size 50257"),
        (lambda h, b: b.extend([1, 2]), r"trailing data: 4 bytes after the 3 examples"),
        (lambda h, b: h.__setitem__(3, 100), r"header says the longest example is 100 bytes but it is 44 bytes"),
    ],
)
def test_read_evalfile_rejects_malformed_files(tmp_path: Path, change: Callable, message: str) -> None:
    path = corrupt(tmp_path, change)
    with pytest.raises(DataFormatError, match=r"e\.bin: .*" + message):
        read_evalfile(path)


# ----------------------------------------------------------------------------- downloads


@pytest.fixture
def file_server(tmp_path: Path) -> Iterator[tuple[str, bytes]]:
    """A local HTTP server in a thread serving one 3 MB file; yields (url, content)."""
    served = tmp_path / "served"
    served.mkdir()
    content = np.random.default_rng(1).integers(0, 256, size=3 * 1024 * 1024 + 17, dtype=np.uint8).tobytes()
    (served / "file.dat").write_bytes(content)

    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(served)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", content
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def broken_server() -> Iterator[Callable[[bytes], str]]:
    """A raw server that answers each connection with the given bytes and hangs up; yields a url maker."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    response: list[bytes] = [b""]

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(response[0])

    threading.Thread(target=serve, daemon=True).start()

    def url_answering(data: bytes) -> str:
        response[0] = data
        return f"http://127.0.0.1:{listener.getsockname()[1]}/file.dat"

    try:
        yield url_answering
    finally:
        listener.close()


def test_download_file_fetches_with_progress(tmp_path: Path, file_server: tuple[str, bytes], capsys: pytest.CaptureFixture) -> None:
    url, content = file_server
    dest = tmp_path / "out" / "file.dat"
    assert download_file(f"{url}/file.dat", dest, chunk_size=1 << 16) == dest
    assert dest.read_bytes() == content
    assert [p.name for p in dest.parent.iterdir()] == ["file.dat"]
    err = capsys.readouterr().err
    assert "file.dat" in err and "100%" in err


def test_download_file_reports_http_errors(tmp_path: Path, file_server: tuple[str, bytes]) -> None:
    url, _ = file_server
    dest = tmp_path / "missing.dat"
    with pytest.raises(DownloadError, match=r"cannot download .*/missing\.dat: HTTP 404"):
        download_file(f"{url}/missing.dat", dest)
    assert list(tmp_path.glob("*missing*")) == []


def test_download_file_reports_refused_connection(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/input.txt"
    dest = tmp_path / "d" / "input.txt"
    with pytest.raises(DownloadError) as info:
        download_file(url, dest, timeout=5.0)
    message = str(info.value)
    assert message.startswith(f"cannot download {url}: ")
    assert "Connection refused" in message
    assert f"(offline? place the file at {dest} to skip the download)" in message
    assert "\n" not in message
    assert list(dest.parent.iterdir()) == []


def test_download_file_leaves_nothing_when_the_server_dies_mid_transfer(
    tmp_path: Path, broken_server: Callable[[bytes], str]
) -> None:
    url = broken_server(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 1000)
    dest = tmp_path / "file.dat"
    with pytest.raises(DownloadError, match="connection closed after 1000 of 100000 bytes"):
        download_file(url, dest, timeout=5.0)
    assert list(tmp_path.iterdir()) == []


def test_download_file_keeps_an_existing_file_when_it_fails(tmp_path: Path, broken_server: Callable[[bytes], str]) -> None:
    url = broken_server(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort")
    dest = tmp_path / "file.dat"
    dest.write_bytes(b"previous content")
    with pytest.raises(DownloadError):
        download_file(url, dest, timeout=5.0)
    assert dest.read_bytes() == b"previous content"
    assert [p.name for p in tmp_path.iterdir()] == ["file.dat"]


def test_download_file_times_out_instead_of_hanging(tmp_path: Path) -> None:
    listener = socket.socket()  # accepts connections (backlog) but never answers
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/file.dat"
        with pytest.raises(DownloadError, match="timed out"):
            download_file(url, tmp_path / "file.dat", timeout=0.5)
    finally:
        listener.close()
    assert list(tmp_path.iterdir()) == []


def test_write_datafile_reports_an_unwritable_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where a directory should be")
    with pytest.raises(DataError, match=r"not_a_dir/s\.bin: cannot write: "):
        write_datafile(blocker / "s.bin", [1, 2, 3])


def test_write_atomically_cleans_up_when_interrupted(tmp_path: Path) -> None:
    dest = tmp_path / "big.bin"
    dest.write_bytes(b"old complete file")

    def interrupted(f: object) -> None:
        f.write(b"half of the new")  # type: ignore[attr-defined]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomically(dest, interrupted)
    assert dest.read_bytes() == b"old complete file"
    assert [p.name for p in tmp_path.iterdir()] == ["big.bin"]
