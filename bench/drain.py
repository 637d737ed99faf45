"""A Python data source that only drains the Arrow batches Spark sends it.

The floor of any Python Data Source writer: the JVM → Python transfer. The
Spark-native path's own overhead is measured against it.
"""

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage


class DrainDataSource(DataSource):
    @classmethod
    def name(cls):
        return "lakesink_drain"

    def writer(self, schema, overwrite):
        return DrainWriter()


class DrainWriter(DataSourceArrowWriter):
    def write(self, iterator):
        rows = 0
        for batch in iterator:
            rows += batch.num_rows
        return WriterCommitMessage()

    def commit(self, messages):
        pass

    def abort(self, messages):
        pass
