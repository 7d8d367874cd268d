"""`mtpedge serve`: an OpenAI-compatible HTTP server on one engine (needs the `serve` extra: aiohttp).

protocol.py checks request bodies, stop_text.py cuts text at `stop` strings, worker.py queues generations for
the one engine on one thread, app.py holds the routes and the response shapes.
"""
