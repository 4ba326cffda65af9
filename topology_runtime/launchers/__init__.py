"""Where worker processes run: ``local`` (forked processes on this machine) and ``spark`` (one
barrier stage, spark-submitted; ``pyspark`` is imported only by ``spark_driver``)."""
