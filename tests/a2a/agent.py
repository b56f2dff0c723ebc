"""A real A2A agent for the gateway's A2A proxy tests (tests/a2a), built on the official SDK
(a2a-sdk 1.3.0, the A2A 1.0 protocol): an AgentExecutor behind the SDK's DefaultRequestHandler and
InMemoryTaskStore, its JSON-RPC binding at `/` (0.3 method names accepted too), its HTTP+JSON
(REST) binding under `/rest` (1.0 paths, and 0.3's under `/rest/v1`), its card at `/.well-known/agent-card.json`, served by uvicorn on
127.0.0.1.

What it does is chosen by the user message's text:

- `hello ...`  one Message (no task) whose text is `echo: <the input>`;
- `count N`    a task: submitted, working, then for i in 1..N a working status update whose
               message is "i" and an artifact chunk "i" (one artifact `count`, appended), ~20 ms
               apart, then completed;
- `wait`       a task that goes working and then sleeps up to 30 s, so that a client can cancel
               it (cancel() moves it to canceled); left alone it completes with "timeout";
- anything else: a task completed at once with the text echoed as an artifact.

    python agent.py --port 0 --port-file FILE [--card-url URL] [--name NAME]

`--port-file` is written (atomically) once the server listens; `--card-url URL` makes the card
advertise URL as its JSON-RPC interface (and no REST interface) instead of its own address.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from a2a.helpers import new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, TaskState
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, TransportProtocol

STEP_S = 0.02
WAIT_S = 30.0
REST_PREFIX = "/rest"

log = logging.getLogger("a2a-test-agent")


class TestExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input().strip()
        words = text.split()
        command = words[0].lower() if words else ""

        if command == "hello":
            await event_queue.enqueue_event(new_text_message(f"echo: {text}", context_id=context.context_id))
            return

        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)  # submitted
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()

        if command == "count":
            n = int(words[1]) if len(words) > 1 else 3
            for i in range(1, n + 1):
                await asyncio.sleep(STEP_S)
                await updater.update_status(
                    TaskState.TASK_STATE_WORKING,
                    message=new_text_message(str(i), context_id=task.context_id, task_id=task.id),
                )
                await updater.add_artifact(
                    [new_text_part(str(i))], artifact_id="count", name="count", append=i > 1, last_chunk=i == n,
                )
            await updater.complete(new_text_message(f"counted to {n}", context_id=task.context_id, task_id=task.id))
        elif command == "wait":
            await asyncio.sleep(WAIT_S)  # cancelled (CancelledError) when the task is
            await updater.complete(new_text_message("timeout", context_id=task.context_id, task_id=task.id))
        else:
            await updater.add_artifact([new_text_part(f"echo: {text}")], name="echo")
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel(new_text_message("canceled", context_id=context.context_id, task_id=context.task_id))


def agent_card(base: str, card_url: str | None, name: str) -> AgentCard:
    if card_url:
        interfaces = [AgentInterface(url=card_url, protocol_binding=TransportProtocol.JSONRPC,
                                     protocol_version=PROTOCOL_VERSION_1_0)]
    else:
        interfaces = [
            AgentInterface(url=f"{base}/", protocol_binding=TransportProtocol.JSONRPC,
                           protocol_version=PROTOCOL_VERSION_1_0),
            AgentInterface(url=f"{base}{REST_PREFIX}", protocol_binding=TransportProtocol.HTTP_JSON,
                           protocol_version=PROTOCOL_VERSION_1_0),
            # The same endpoints for 0.3 clients: with these the served card also carries 0.3's
            # top-level `url`/`preferredTransport`/`protocolVersion` and `additionalInterfaces`.
            AgentInterface(url=f"{base}/", protocol_binding=TransportProtocol.JSONRPC,
                           protocol_version=PROTOCOL_VERSION_0_3),
            AgentInterface(url=f"{base}{REST_PREFIX}", protocol_binding=TransportProtocol.HTTP_JSON,
                           protocol_version=PROTOCOL_VERSION_0_3),
        ]
    return AgentCard(
        name=name,
        description="Switchyard's A2A test agent: hello, count N, wait.",
        version="1.0.0",
        supported_interfaces=interfaces,
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(id="hello", name="hello", description="Echoes the message back as one Message.",
                       tags=["echo"], examples=["hello world"]),
            AgentSkill(id="count", name="count", description="A task that counts 1..N in updates and chunks.",
                       tags=["task", "stream"], examples=["count 5"]),
            AgentSkill(id="wait", name="wait", description="A long task, to be cancelled.",
                       tags=["task", "cancel"], examples=["wait"]),
        ],
    )


def build_app(base: str, card_url: str | None, name: str) -> Starlette:
    card = agent_card(base, card_url, name)
    handler = DefaultRequestHandler(agent_executor=TestExecutor(), task_store=InMemoryTaskStore(), agent_card=card)

    async def health(_request):
        return JSONResponse({"status": "ok"})

    routes = [Route("/health", health, methods=["GET"])]
    routes += create_agent_card_routes(card)
    routes += create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True)
    routes += create_rest_routes(handler, path_prefix=REST_PREFIX, enable_v0_3_compat=True)
    return Starlette(routes=routes)


async def serve(args: argparse.Namespace) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    sock.setblocking(False)
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"

    app = build_app(base, args.card_url, args.name)
    config = uvicorn.Config(app, log_level=args.log_level, lifespan="off", timeout_graceful_shutdown=1,
                            access_log=args.log_level == "debug")
    server = uvicorn.Server(config)

    async def announce() -> None:
        while not server.started:
            if server.should_exit:
                return
            await asyncio.sleep(0.01)
        if args.port_file:
            tmp = Path(f"{args.port_file}.tmp")
            tmp.write_text(str(port))
            os.replace(tmp, args.port_file)
        print(f"listening on {base}", flush=True)

    announcer = asyncio.create_task(announce())
    await server.serve(sockets=[sock])
    announcer.cancel()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file")
    p.add_argument("--card-url", help="advertise this URL as the JSON-RPC interface instead of our own")
    p.add_argument("--name", default="switchyard-a2a-test-agent")
    p.add_argument("--log-level", default=os.environ.get("A2A_AGENT_LOG", "warning"))
    args = p.parse_args()
    logging.basicConfig(level=args.log_level.upper())
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
