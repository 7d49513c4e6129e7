"""The protocol vocabulary every other package shares, importing nothing of ours: reply codes
and errors, frames, method argument tables, content properties and field tables, timers.

Source: AMQP 0-9-1 spec sections 4.2 (frames), 4.2.5 (field types), 1.x (reply codes).
"""
