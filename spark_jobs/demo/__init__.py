"""The demo: order events as JSON (`events`) and a producer for them (`produce`, `streamfill produce`). Its
pipeline, `orders`, is an entry of dags/streamfill_jobs.yaml like any user's; generic code never imports the demo."""
