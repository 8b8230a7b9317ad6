"""The demo: order events as JSON (`events`), a producer for them (`produce`), and the `orders` pipeline's
parse, rules and quality suite (`orders`). An example like any user's pipeline: generic code never imports it;
the pipeline registry (`spark_jobs.pipelines`) names it."""
