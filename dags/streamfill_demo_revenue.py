"""A DAG downstream of streamfill, as a team writes one: it runs when the `orders` stream's commits are announced
(one run per announcement, keyed commits:orders:<n>) and adds the revenue of exactly the orders those commits hold
to the table orders_revenue, one row per announcement. `make demo` shows its runs; `runs` counts how often each
announcement was processed, so a repeated or lost announcement would show."""

from __future__ import annotations

from airflow.sdk import DAG, IdentityMapper, PartitionedAssetTimetable, task

from streamfill.orchestration import downstream

with DAG("streamfill_demo_revenue", catchup=False, max_active_runs=1, tags=["streamfill"],
         schedule=PartitionedAssetTimetable(assets=downstream.stream_asset("orders"),
                                            default_partition_mapper=IdentityMapper()), doc_md=__doc__):

    @task
    def revenue() -> None:
        from sqlalchemy import func, select, text

        from streamfill.offsets_db.announce_plan import commits_key
        from streamfill.offsets_db.engine import make_engine
        from streamfill.orchestration.endpoints import endpoints

        engine = make_engine(endpoints().db_url)
        try:
            with engine.begin() as conn:
                conn.execute(text(
                    "CREATE TABLE IF NOT EXISTS orders_revenue (announcement text PRIMARY KEY, commits text NOT NULL, "
                    "orders bigint NOT NULL, revenue numeric(16, 2) NOT NULL, runs int NOT NULL DEFAULT 1, "
                    "updated_at timestamptz NOT NULL DEFAULT now())"))
                for event in downstream.triggering_events():
                    rows = downstream.rows_in("orders_events", event["offsets"], "event_type", "amount").subquery()
                    orders, total = conn.execute(select(func.count(), func.coalesce(func.sum(rows.c.amount), 0))
                                                 .where(rows.c.event_type == "order")).one()
                    key = commits_key(event["job"], event["announcement"])
                    conn.execute(text(
                        "INSERT INTO orders_revenue (announcement, commits, orders, revenue) VALUES (:k, :c, :o, :r) "
                        "ON CONFLICT (announcement) DO UPDATE SET runs = orders_revenue.runs + 1, "
                        "updated_at = now()"),
                        {"k": key, "c": "{}-{}".format(*event["commits"]), "o": orders, "r": total})
                    print(f"{key}: commits {event['commits']}, {orders:,} orders, revenue {total:,.2f}", flush=True)
        finally:
            engine.dispose()

    revenue()
