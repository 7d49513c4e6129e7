"""A vhost's on-disk state: its shared message store and its durable queues' indexes.

Layout under the broker's data dir: ``vhosts/<vhost-id>/msg_store/*.seg`` and
``vhosts/<vhost-id>/queues/<queue-id>.idx``, where the ids are hex SHA-1 digests of the
names, so any vhost or queue name maps to a safe file name.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from queue_store.backing import BackingQueue
from queue_store.durability import Durability
from queue_store.journal_recovery import JournalSummary, live_entries, summarize
from queue_store.msg_store import MessageStore
from queue_store.queue_index import EMBED_MSGS_BELOW, IndexEntry, QueueIndex
from queue_store.ram_budget import RamBudget
from queue_store.variable_queue import VariableQueue


def name_id(name: str) -> str:
    """A file-name-safe id for a vhost or queue name."""
    return hashlib.sha1(name.encode("utf-8")).hexdigest()


class VhostStorage:
    """The message store and queue-index folder of one vhost.

    Args:
        directory: the vhost's folder (created).
        durability: the broker's group-commit coordinator (the store registers with it).
        embed_below: persistent messages whose body is smaller (bytes) are embedded in their
            queue's index instead of the message store (RabbitMQ's
            ``queue_index_embed_msgs_below``, 4,096; 0 embeds none).
        budget: the broker-wide RAM budget the paging queues share (None: each keeps the
            per-queue defaults).
    """

    def __init__(self, directory: Path, durability: Durability,
                 embed_below: int = EMBED_MSGS_BELOW, budget: RamBudget | None = None) -> None:
        self.directory = Path(directory)
        self.durability = durability
        self.embed_below = embed_below
        self.budget = budget
        self.store = MessageStore(self.directory / "msg_store")
        self.index_dir = self.directory / "queues"
        self.index_dir.mkdir(parents=True, exist_ok=True)
        for leftover in self.index_dir.glob("*.deleted-*"):  # deleted queues, crash between
            leftover.unlink()
        self.paging_dir = self.directory / "paging"
        if self.paging_dir.exists():  # paged messages are transient: gone after a restart
            for leftover in self.paging_dir.iterdir():
                leftover.unlink()
        self.paging_dir.mkdir(parents=True, exist_ok=True)
        durability.add_store(self.store)

    def index_path(self, queue: str) -> Path:
        return self.index_dir / f"{name_id(queue)}.idx"

    def backing_queue_factory(self, queue: str) -> Callable[[int], BackingQueue]:
        """Makes the paging FIFO of each priority level of ``queue``."""
        base = name_id(queue)
        def make(level: int) -> BackingQueue:
            vq = VariableQueue(self.paging_dir / f"{base}.{level}.delta", store=self.store,
                               errors=self.durability.write_errors)
            if self.budget is not None:
                vq.set_budget(*self.budget.share)
                self.budget.register(vq)
            return vq

        return make

    def open_index(self, queue: str) -> QueueIndex:
        return QueueIndex(self.index_path(queue))

    def recover_index(self, queue: str) -> Iterator[IndexEntry]:
        """Live entries of ``queue``'s journal, streamed in sequence order: the embedded
        ones, and those whose store record survived (retained in the store)."""
        for e in QueueIndex.iter_live(self.index_path(queue)):
            if e.payload is not None or self.store.retain(e.msg_id):
                yield e

    def summarize_index(self, queue: str, index: QueueIndex
                        ) -> tuple[JournalSummary, set[int]] | None:
        """Recovery without reading every message (:mod:`queue_store.journal_recovery`):
        the summary of ``queue``'s journal, compacted first when acked records dominate it,
        with its store-held live messages retained and the segment bookkeeping of ``index``
        resumed. Also returns the seqs whose store record is lost. None: the journal is not
        in sequence order (hand-made): use :meth:`recover_index` instead."""
        path = self.index_path(queue)
        summary = summarize(path, self.stored_size)
        if not summary.ordered:
            return None
        if summary.dead > summary.live:  # mostly dead: rewrite it (streamed, no decoding)
            index.compact(live_entries(summary))
            summary = summarize(path, self.stored_size)
        lost = {seq for seq, msg_id in zip(summary.stored_seqs, summary.stored_ids, strict=True)
                if not self.store.retain(msg_id)}
        index.adopt(summary.files)
        return summary, lost

    def stored_size(self, msg_id: int) -> int:
        """Bytes of a store-held message's record (its body size estimate; 0 if lost)."""
        loc = self.store.index.get(msg_id)
        return loc.size if loc is not None else 0

    def delete_index(self, index: QueueIndex) -> None:
        """Remove a deleted queue's journal (after any fsync in flight)."""
        self.durability.forget_index(index)
        index.retire()
        if self.durability.syncing:
            self.durability.after_sync(index.delete)
        else:
            index.delete()

    def close(self) -> None:
        self.store.close()

    def destroy(self) -> None:
        """The vhost was deleted: close and remove its folder (after any fsync in flight),
        so a vhost created later under the same name starts empty."""
        def remove() -> None:
            self.durability.remove_store(self.store)
            self.store.close()
            shutil.rmtree(self.directory, ignore_errors=True)

        if self.durability.syncing:
            self.durability.after_sync(remove)
        else:
            remove()
