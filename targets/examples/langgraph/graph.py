"""A LangGraph agent whose reply streams token by token: the graph `langgraph dev` (or a LangGraph
server) serves as "agent" (langgraph.json). A turn's input is {prompt, key, max_tokens}; the reply
node writes each token to the run's custom stream as {"token": ...} and appends the turn
({input, idempotency_key, output}) to the thread's `turns`, which the read-back returns.

The tokens stand in for a model's (no model is called here: put yours in `reply`); they come at
TOKENS_PER_SECOND (environment, default 100), so that a stream lasts long enough to be dropped.
"""

from __future__ import annotations

import asyncio
import operator
import os
from typing import Annotated, TypedDict

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph

WORDS = "plan think search read write check answer done".split()


class Turn(TypedDict):
    input: str
    idempotency_key: str
    output: str


class State(TypedDict, total=False):
    prompt: str
    key: str
    max_tokens: int
    turns: Annotated[list[Turn], operator.add]


async def reply(state: State) -> dict:
    write = get_stream_writer()
    rate = float(os.environ.get("TOKENS_PER_SECOND", "100"))
    prompt = state.get("prompt") or ""
    tokens = []
    for index in range(int(state.get("max_tokens") or 16)):
        if rate > 0:
            await asyncio.sleep(1 / rate)
        token = WORDS[(len(prompt) + index) % len(WORDS)]
        write({"token": token})
        tokens.append(token)
    return {"turns": [{"input": prompt, "idempotency_key": state.get("key") or "", "output": " ".join(tokens)}]}


builder = StateGraph(State)
builder.add_node("reply", reply)
builder.add_edge(START, "reply")
builder.add_edge("reply", END)
graph = builder.compile()
