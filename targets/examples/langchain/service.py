"""A LangChain agent service as a team writes one, brought to drillbook without changing it.

LangServe serves a RunnableWithMessageHistory at /chat (``/chat/invoke``; the session id travels in
``config.configurable.session_id``), the chat history lives in SQL (SQLChatMessageHistory over SQLAlchemy's
async engine, one table shared by every replica), and one extra route reads a session's history back
(``GET /history/{session_id}``), which is what any team adds to look at a conversation. The model
is LangChain's own fake chat model, so the example runs without a provider key.

    CHAT_HISTORY_URL=sqlite+aiosqlite:////var/lib/agent/history.sqlite uvicorn service:app --port 8001

``CHAT_HISTORY_URL=memory`` keeps each replica's history in its own memory: the deliberate
mistake that drillbook's HA and restore drills must catch (a replica's loss loses its sessions).
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException
from langchain_community.chat_message_histories import SQLChatMessageHistory
from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import messages_to_dict
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory
from langserve import add_routes
from sqlalchemy.exc import OperationalError

DATABASE = os.environ.get("CHAT_HISTORY_URL", "memory")
_in_memory: dict[str, InMemoryChatMessageHistory] = {}


def history(session_id: str) -> BaseChatMessageHistory:
    if DATABASE == "memory":
        return _in_memory.setdefault(session_id, InMemoryChatMessageHistory())
    return SQLChatMessageHistory(session_id=session_id, connection=DATABASE, async_mode=True)


prompt = ChatPromptTemplate.from_messages([
    ("system", "You are a careful agent."), MessagesPlaceholder("history"), ("human", "{input}")])
agent = RunnableWithMessageHistory(prompt | FakeListChatModel(responses=["Noted.", "Done.", "On it."]), history,
                                   input_messages_key="input", history_messages_key="history")

@asynccontextmanager
async def history_table(app: FastAPI):
    """SQLChatMessageHistory makes its table on first use, and first requests racing on a new
    database (two replicas, or two requests of one) fail with "table message_store already
    exists"; so the table is made before requests come. A replica that loses that race to
    another finds the table made on its second look."""
    if DATABASE != "memory":
        try:
            await history("startup").aget_messages()
        except OperationalError:
            await history("startup").aget_messages()
    yield


app = FastAPI(title="agent", lifespan=history_table)
add_routes(app, agent, path="/chat")


@app.get("/history/{session_id}")
async def read_history(session_id: str) -> dict:
    messages = await history(session_id).aget_messages()
    if not messages:
        raise HTTPException(404, "no such session")
    return {"messages": messages_to_dict(messages)}


@app.get("/health")
def health() -> dict:
    return {"ok": True}
