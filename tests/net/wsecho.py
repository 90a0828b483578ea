"""A WebSocket echo server for the net tier, run by sbxd as the command user:

    python3 wsecho.py PORT
"""
import asyncio
import sys

import websockets


async def echo(ws, path=None):
    async for m in ws:
        await ws.send(m)


async def main():
    async with websockets.serve(echo, "127.0.0.1", int(sys.argv[1]), max_size=None):
        await asyncio.Future()


asyncio.run(main())
