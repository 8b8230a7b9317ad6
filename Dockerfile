# The image of every Airflow service in docker-compose.yml (`docker compose up -d --build` builds it):
# the official Airflow image, Java 17 for Spark, and streamfill with the versions of constraints.txt. Spark runs in
# local mode inside the task that calls spark-submit (the pyspark package's), so no Spark service is needed.
#
# The slim variant is core Airflow without the ~30 providers of the regular image that streamfill does not
# use, so `pip check` judges streamfill's versions against Airflow itself. Every install step is in
# docker/install.sh; tests/integration/test_image_install.py runs its `python` part the same way.
ARG AIRFLOW_VERSION=3.3.2
FROM apache/airflow:slim-${AIRFLOW_VERSION}-python3.11

USER root
COPY docker/install.sh /opt/streamfill/docker/install.sh
RUN bash /opt/streamfill/docker/install.sh os \
 && mkdir -p /opt/airflow/auth /opt/airflow/streamfill \
 && chown -R airflow:0 /opt/streamfill /opt/airflow/auth /opt/airflow/streamfill \
 && chmod -R g+rwX /opt/streamfill /opt/airflow/auth /opt/airflow/streamfill

USER airflow
COPY --chown=airflow:0 . /opt/streamfill
RUN PIP_NO_CACHE_DIR=1 bash /opt/streamfill/docker/install.sh python

# streamfill.REPO_ROOT is /opt/streamfill: the DAGs and jobs file in dags/, spark_jobs/*.py for spark-submit
ENV AIRFLOW__CORE__DAGS_FOLDER=/opt/streamfill/dags \
    STREAMFILL_HOME=/opt/airflow/streamfill
WORKDIR /opt/airflow
