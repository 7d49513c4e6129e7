"""An asyncio event loop in a daemon thread, for the drivers of asyncio libraries."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any

CALL_TIMEOUT = 30.0


class LoopThread:
    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = CALL_TIMEOUT) -> Any:
        """Run ``coro`` on the loop, wait at most ``timeout`` seconds for its result."""
        return asyncio.run_coroutine_threadsafe(
            asyncio.wait_for(coro, timeout), self.loop).result(timeout + 5)

    def stop(self) -> None:
        if not self.thread.is_alive():
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(5)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()
