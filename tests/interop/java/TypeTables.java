// Tables of Paimon types Spark has no exact twin for, written by Apache Paimon's own Java
// writer, and reads of them with a filter (so that Paimon prunes files by their statistics).
// Compiled beside PaimonOracle by tests/interop/type_tables.py.
//
//   write <kind> <table>
//       kinds: ts-low   (TIMESTAMP(0), TIMESTAMP_LTZ(0), TIMESTAMP(3): stats kept in millis)
//              time    (TIME and TIME(3): millis of day)
//              nanos   (TIMESTAMP(9), TIMESTAMP_LTZ(9) with sub-microsecond digits)
//   ids <table> <column> <ge|lt> <epoch millis> <out.txt>
//       the ids of the rows Paimon returns for `column >= / < millis`, one per line: Paimon
//       skips files by their min/max statistics and returns every row of the files it keeps.

import org.apache.paimon.data.GenericRow;
import org.apache.paimon.data.InternalRow;
import org.apache.paimon.data.Timestamp;
import org.apache.paimon.fs.Path;
import org.apache.paimon.fs.local.LocalFileIO;
import org.apache.paimon.predicate.Predicate;
import org.apache.paimon.predicate.PredicateBuilder;
import org.apache.paimon.reader.RecordReader;
import org.apache.paimon.schema.Schema;
import org.apache.paimon.schema.SchemaManager;
import org.apache.paimon.table.FileStoreTable;
import org.apache.paimon.table.FileStoreTableFactory;
import org.apache.paimon.table.sink.BatchTableCommit;
import org.apache.paimon.table.sink.BatchTableWrite;
import org.apache.paimon.table.sink.BatchWriteBuilder;
import org.apache.paimon.table.source.ReadBuilder;
import org.apache.paimon.types.DataTypes;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;

public class TypeTables {

    public static void main(String[] args) throws Exception {
        if (args[0].equals("write")) {
            write(args[1], args[2]);
        } else if (args[0].equals("ids")) {
            ids(args[1], args[2], args[3], Long.parseLong(args[4]), args[5]);
        } else {
            throw new IllegalArgumentException("usage: write <kind> <table> | ids <table> <col> <ge|lt> <millis> <out>");
        }
    }

    static FileStoreTable create(String path, Schema schema) throws Exception {
        new SchemaManager(LocalFileIO.create(), new Path(path)).createTable(schema);
        return FileStoreTableFactory.create(LocalFileIO.create(), new Path(path));
    }

    static void commit(FileStoreTable t, List<GenericRow> rows) throws Exception {
        BatchWriteBuilder wb = t.newBatchWriteBuilder();
        try (BatchTableWrite w = wb.newWrite(); BatchTableCommit c = wb.newCommit()) {
            for (GenericRow r : rows) w.write(r);
            c.commit(w.prepareCommit());
        }
    }

    // 2024-01-01T00:00:00Z
    static final long BASE = 1_704_067_200_000L;
    static final long DAY = 86_400_000L;

    static void write(String kind, String path) throws Exception {
        switch (kind) {
            case "ts-low": {
                // Two commits a month apart (one file each), so a filter between them prunes one.
                FileStoreTable t = create(path, Schema.newBuilder().column("id", DataTypes.INT())
                        .column("ts0", DataTypes.TIMESTAMP(0))
                        .column("l0", DataTypes.TIMESTAMP_WITH_LOCAL_TIME_ZONE(0))
                        .column("ts3", DataTypes.TIMESTAMP(3)).option("bucket", "-1").build());
                for (int k = 0; k < 2; k++) {
                    List<GenericRow> rows = new ArrayList<>();
                    for (int i = 0; i < 3; i++) {
                        long ms = BASE + k * 31 * DAY + i * 1000L;
                        rows.add(GenericRow.of(k * 10 + i, Timestamp.fromEpochMillis(ms),
                                Timestamp.fromEpochMillis(ms + 3000), Timestamp.fromEpochMillis(ms + 7)));
                    }
                    rows.add(GenericRow.of(k * 10 + 9, null, null, null));
                    commit(t, rows);
                }
                break;
            }
            case "time": {
                FileStoreTable t = create(path, Schema.newBuilder().column("id", DataTypes.INT())
                        .column("t", DataTypes.TIME()).column("t3", DataTypes.TIME(3))
                        .option("bucket", "-1").build());
                commit(t, List.of(GenericRow.of(1, 0, 45_296_789), GenericRow.of(2, 86_399_000, null)));
                break;
            }
            case "nanos": {
                // Sub-microsecond digits: Spark (micros) cannot hold them. (None before 1970: Paimon
                // 1.0's own reader fails on the INT96 its writer stores for such a time.)
                FileStoreTable t = create(path, Schema.newBuilder().column("id", DataTypes.INT())
                        .column("ts9", DataTypes.TIMESTAMP(9))
                        .column("ltz9", DataTypes.TIMESTAMP_WITH_LOCAL_TIME_ZONE(9))
                        .option("bucket", "-1").build());
                commit(t, List.of(GenericRow.of(1, Timestamp.fromEpochMillis(BASE, 123_456),
                        Timestamp.fromEpochMillis(5, 1)), GenericRow.of(2, null, null)));
                break;
            }
            default:
                throw new IllegalArgumentException("unknown kind " + kind);
        }
    }

    static void ids(String path, String column, String op, long millis, String out) throws Exception {
        FileStoreTable t = FileStoreTableFactory.create(LocalFileIO.create(), new Path(path));
        PredicateBuilder pb = new PredicateBuilder(t.rowType());
        int index = pb.indexOf(column);
        Timestamp value = Timestamp.fromEpochMillis(millis);
        Predicate p = op.equals("ge") ? pb.greaterOrEqual(index, value) : pb.lessThan(index, value);
        ReadBuilder rb = t.newReadBuilder().withFilter(p);
        StringBuilder sb = new StringBuilder();
        try (RecordReader<InternalRow> reader = rb.newRead().createReader(rb.newScan().plan())) {
            RecordReader.RecordIterator<InternalRow> batch;
            while ((batch = reader.readBatch()) != null) {
                InternalRow row;
                while ((row = batch.next()) != null) sb.append(row.getInt(0)).append('\n');
                batch.releaseBatch();
            }
        }
        Files.write(Paths.get(out), sb.toString().getBytes(StandardCharsets.UTF_8));
    }
}
