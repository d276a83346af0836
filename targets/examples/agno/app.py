"""An Agno AgentOS app: one agent whose sessions live in a shared database, so that any replica
serves any session. This is the whole launch script; drillbook needs nothing else from the service.

Run each replica with ``uvicorn app:app``; configuration comes from the environment:
  AGENT_DB    the sessions database: a SQLite file path, or a postgresql+psycopg:// URL
              ("memory" keeps them in each replica's memory: the mistake the HA drill catches)
  MODEL_URL   an OpenAI-compatible endpoint (your model gateway, e.g. the LiteLLM proxy)
  MODEL_KEY   its key; MODEL_NAME the model it routes (default "default")
"""

import os

from agno.agent import Agent
from agno.models.openai.like import OpenAILike
from agno.os import AgentOS

where = os.environ["AGENT_DB"]
if where == "memory":
    from agno.db.in_memory import InMemoryDb

    db = InMemoryDb()
elif "://" in where:
    from agno.db.postgres import PostgresDb

    db = PostgresDb(db_url=where)
else:
    from agno.db.sqlite import SqliteDb

    db = SqliteDb(db_file=where)

agent = Agent(
    id="assistant",
    name="assistant",
    model=OpenAILike(id=os.environ.get("MODEL_NAME", "default"), base_url=os.environ["MODEL_URL"],
                     api_key=os.environ.get("MODEL_KEY", "none")),
    db=db,
    add_history_to_context=True,
)
app = AgentOS(agents=[agent]).get_app()
