"""Shrink a failing session input (a crash file of fuzz/fuzz_connection.py) to a small one
that fails the same way: drops whole frames, then single bytes, while the failure signature
(the known-bug id or the first problem's text up to its first colon) stays the same.

    python fuzz/minimize.py fuzz/crashes/crash-<sha1> [-o tests/fuzz/corpus/NAME.bin]

Prints the minimal stream frame by frame, in hex.
"""

from __future__ import annotations

import argparse
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fuzz import harness  # noqa: E402


def signature(data: bytes) -> str | None:
    outcome = harness.run_input(data, allow_known=False)
    for e in outcome.internals:
        bug = harness.known_bug(e)
        return bug.id if bug else f"{e.exc_type} at {e.stack[-1] if e.stack else e.where}"
    for problem in outcome.problems:
        bug = harness.known_bug(problem)
        return bug.id if bug else problem.split(":", 1)[0]
    return None


def split_frames(stream: bytes) -> list[bytes]:
    """The stream cut at frame boundaries (what does not parse stays one piece)."""
    out, pos = [], 0
    if stream.startswith(b"AMQP"):
        out.append(stream[:8])
        pos = 8
    while pos < len(stream):
        if len(stream) - pos < 7:
            break
        size = struct.unpack_from(">I", stream, pos + 3)[0]
        end = pos + 8 + size
        if end > len(stream):
            break
        out.append(stream[pos:end])
        pos = end
    if pos < len(stream):
        out.append(stream[pos:])
    return out


def minimize(data: bytes) -> bytes:
    want = signature(data)
    if want is None:
        raise SystemExit("the input does not fail")
    head, stream = data[:3], data[3:]
    for simpler in (bytes((head[0], 0, head[2])), bytes((head[0], 0, 0))):
        if signature(simpler + stream) == want:
            head = simpler
    frames = split_frames(stream)
    i = 0
    while i < len(frames):  # drop whole frames
        trial = frames[:i] + frames[i + 1:]
        if signature(head + b"".join(trial)) == want:
            frames = trial
        else:
            i += 1
    stream = b"".join(frames)
    i = 0
    while i < len(stream) and len(stream) < 2000:  # drop single bytes
        trial = stream[:i] + stream[i + 1:]
        if signature(head + trial) == want:
            stream = trial
        else:
            i += 1
    return head + stream


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input")
    parser.add_argument("-o", "--output", help="write the minimal input here")
    args = parser.parse_args()
    data = Path(args.input).read_bytes()
    small = minimize(data)
    print(f"signature: {signature(small)}; {len(data)} -> {len(small)} bytes")
    scenario, chunk, drain, advance, stream = harness.decode_input(small)
    print(f"scenario {harness.SCENARIOS[scenario][0]}, chunk {chunk}, drain {drain}, "
          f"advance {advance}")
    for frame in split_frames(stream):
        print("  ", frame.hex())
    if args.output:
        Path(args.output).write_bytes(small)
        print("written to", args.output)


if __name__ == "__main__":
    main()
