"""One Spark session on the current Ray (RayDP), set up so that it works on Java 17.

`start_spark` wraps `raydp.init_spark` with the two settings RayDP needs here and users trip on:
the JVM's `--add-opens` options (the list in raydp's own `bin/raydp-submit`) for the driver, the
executors and RayDP's app master, and Spark's Python workers running this interpreter
(`PYSPARK_PYTHON` and `spark.pyspark.python`), so they can import what the driver imports.
"""
from __future__ import annotations

import os
import sys
from typing import Any

import ray

# raydp 1.6.5 bin/raydp-submit: what Spark on Java 17 needs opened up
JAVA17_OPTIONS = (
    "-XX:+IgnoreUnrecognizedVMOptions",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.net=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/java.math=ALL-UNNAMED",
    "--add-opens=java.base/java.text=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.cs=ALL-UNNAMED",
    "--add-opens=java.base/sun.security.action=ALL-UNNAMED",
    "--add-opens=java.base/sun.util.calendar=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
)
JAVA_OPTION_KEYS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions",
                    "spark.ray.raydp_app_master.extraJavaOptions")

# Defaults for a pipeline on a small machine; the caller's `configs` win.
SPARK_DEFAULTS: dict[str, str] = {
    # pandas <-> Spark through Arrow, not row by row
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
}


class SparkStartError(RuntimeError):
    """Spark could not start on Ray; the message says what to check."""


def spark_configs(configs: dict[str, Any] | None = None, python: str | None = None) -> dict[str, str]:
    """The Spark configs `start_spark` passes to RayDP: defaults, the Java 17 options (appended to
    any the caller gave) and the Python interpreter, then the caller's own settings."""
    python = python or sys.executable
    user = {k: str(v) for k, v in (configs or {}).items()}
    out = dict(SPARK_DEFAULTS) | {"spark.pyspark.python": python, "spark.pyspark.driver.python": python}
    out.update({k: v for k, v in user.items() if k not in JAVA_OPTION_KEYS})
    for key in JAVA_OPTION_KEYS:
        out[key] = " ".join(filter(None, [user.get(key, ""), *JAVA17_OPTIONS]))
    return out


def start_spark(app_name: str, executors: int = 1, executor_cores: int = 1, executor_memory: str | int = "1g",
                configs: dict[str, Any] | None = None):
    """A SparkSession whose executors are Ray actors on the current Ray (started if needed).

    One per process (RayDP's rule): call `stop_spark()` before starting another. Takes 10-15 s and
    ~0.7 GiB for the JVMs."""
    try:
        import raydp
    except ImportError:
        raise SparkStartError("raydp is not installed: pip install -e '.[spark]' "
                              "(pyspark 3.5 and raydp 1.6, Java 17 on PATH or JAVA_HOME)") from None
    if executors < 1 or executor_cores < 1:
        raise ValueError(f"need at least one executor with one core, got executors={executors}, "
                         f"executor_cores={executor_cores}")
    # micro-batches are small jobs: one shuffle partition per executor core, not Spark's 200
    # (aggregating 5,000 records: 0.49 s with 4 partitions on one core, 0.24 s with 1)
    merged = spark_configs({"spark.sql.shuffle.partitions": executors * executor_cores} | dict(configs or {}))
    os.environ["PYSPARK_PYTHON"] = merged["spark.pyspark.python"]
    os.environ["PYSPARK_DRIVER_PYTHON"] = merged["spark.pyspark.driver.python"]
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    free_cpus = ray.available_resources().get("CPU", 0)
    if free_cpus < executors * executor_cores:
        raise SparkStartError(
            f"Ray has {free_cpus:g} free CPUs but {executors} executor(s) x {executor_cores} core(s) were asked: "
            f"start Ray with more CPUs (ray.init(num_cpus=...)) or ask for fewer executors/cores")
    try:
        return raydp.init_spark(app_name, num_executors=executors, executor_cores=executor_cores,
                                executor_memory=executor_memory, configs=merged)
    except Exception as e:
        if "has inited" in str(e):
            raise SparkStartError("a Spark session is already running in this process: "
                                  "use it, or call stop_spark() first") from None
        raise


def stop_spark() -> None:
    """Stop the session `start_spark` made (its executors and app master actors too)."""
    import raydp

    raydp.stop_spark()
