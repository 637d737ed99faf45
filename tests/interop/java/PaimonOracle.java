// An independent reader (and writer) of Paimon tables for lakesink's interop tests,
// built on Apache Paimon's own Java library. Compiled once per test session.
//
//   read  <table> <out.jsonl> [<table> <out.jsonl> ...]
//       every row of the table's latest snapshot as one JSON object per line
//   write <kind> <table> [<kind> <table> ...]
//       creates a table with Paimon's own writer (kinds: see main), then prints nothing
//   read-branch <table> <branch> <out.jsonl> [<table> <branch> <out.jsonl> ...]
//       every row of the branch's latest snapshot (branch "main": main's), the table opened
//       with the `branch` option
//   mode <table> <out.json>
//       {"bucket": <the bucket option>, "bucket_mode": <Paimon's BucketMode of the table>}
//   changes <table> <out.jsonl> <after-snapshot>
//       Paimon's own streaming read of the table from snapshot after+1 to the latest: every row
//       with its row kind in a "rowkind" field (+I, -U, +U, -D), in the order Paimon returns them
//   replay <spec.json> <table> [<spec.json> <table> ...]
//       creates the table the spec describes and writes its batches with Paimon's own writer,
//       one commit per batch, rows in order: {"columns": [[name, type], ...], "primary_key": [...],
//       "partition": [...], "options": {...}, "batches": [[[row kind, [values...]], ...], ...]}
//       (types: INT, BIGINT, DOUBLE, BOOLEAN, STRING, DECIMAL(p,s); row kinds +I, -U, +U, -D);
//       "full_compact_each": true adds a full compaction of every bucket after each batch
//
// JSON encoding (the Python side normalises its reads the same way):
//   integers/booleans/strings as JSON; FLOAT/DOUBLE as numbers, NaN/±Infinity as strings;
//   DECIMAL as a plain string; DATE as ISO yyyy-mm-dd; TIME as millis of day;
//   TIMESTAMP/TIMESTAMP_LTZ as epoch microseconds; BINARY/VARBINARY as base64;
//   ARRAY as a list; MAP as a list of [key, value] pairs; ROW as an object.

import org.apache.paimon.data.BinaryRow;
import org.apache.paimon.data.BinaryString;
import org.apache.paimon.data.Decimal;
import org.apache.paimon.data.GenericArray;
import org.apache.paimon.data.GenericMap;
import org.apache.paimon.data.GenericRow;
import org.apache.paimon.data.InternalArray;
import org.apache.paimon.data.InternalMap;
import org.apache.paimon.data.InternalRow;
import org.apache.paimon.data.Timestamp;
import org.apache.paimon.fs.FileIO;
import org.apache.paimon.fs.Path;
import org.apache.paimon.disk.IOManager;
import org.apache.paimon.fs.local.LocalFileIO;
import org.apache.paimon.reader.RecordReader;
import org.apache.paimon.schema.Schema;
import org.apache.paimon.schema.SchemaChange;
import org.apache.paimon.schema.SchemaManager;
import org.apache.paimon.table.FileStoreTable;
import org.apache.paimon.table.FileStoreTableFactory;
import org.apache.paimon.table.sink.BatchTableCommit;
import org.apache.paimon.table.sink.BatchTableWrite;
import org.apache.paimon.table.sink.BatchWriteBuilder;
import org.apache.paimon.table.source.ReadBuilder;
import org.apache.paimon.types.ArrayType;
import org.apache.paimon.types.DataField;
import org.apache.paimon.types.DataType;
import org.apache.paimon.types.DataTypes;
import org.apache.paimon.types.DecimalType;
import org.apache.paimon.types.LocalZonedTimestampType;
import org.apache.paimon.types.MapType;
import org.apache.paimon.types.RowKind;
import org.apache.paimon.types.RowType;
import org.apache.paimon.types.TimestampType;

import java.io.BufferedWriter;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

public class PaimonOracle {

    static final String TMP = System.getProperty("java.io.tmpdir");

    public static void main(String[] args) throws Exception {
        if (args[0].equals("mode")) {
            // mode <table> <out.json>: the table's bucket option and bucket mode as Paimon sees them
            FileStoreTable t = FileStoreTableFactory.create(LocalFileIO.create(), new Path(args[1]));
            Files.write(Paths.get(args[2]), ("{\"bucket\": " + t.coreOptions().bucket() + ", \"bucket_mode\": \""
                    + t.bucketMode() + "\"}").getBytes(StandardCharsets.UTF_8));
            return;
        }
        if (args[0].equals("read-with")) {
            // read-with <table> <out.jsonl> <key=value,...>: read with table options overridden in
            // memory (the table's files untouched), e.g. a postpone-bucket table (bucket=-2, which
            // this Paimon predates) read as the fixed-bucket table its compacted buckets form.
            FileIO io = LocalFileIO.create();
            org.apache.paimon.schema.TableSchema schema = new SchemaManager(io, new Path(args[1])).latest().get();
            Map<String, String> options = new HashMap<>();
            for (String kv : args[3].split(",")) {
                String[] parts = kv.split("=", 2);
                options.put(parts[0], parts[1]);
            }
            read(FileStoreTableFactory.create(io, new Path(args[1]), schema.copy(options)), args[2]);
            return;
        }
        if (args[0].equals("read-branch")) {
            // read-branch <table> <branch> <out.jsonl> [...]: the latest snapshot of a branch, the
            // table opened with the `branch` option as Paimon's engines open one (its schema, snapshots).
            for (int i = 1; i + 2 < args.length; i += 3) {
                org.apache.paimon.options.Options options = new org.apache.paimon.options.Options();
                options.set(org.apache.paimon.CoreOptions.PATH, args[i]);
                options.set(org.apache.paimon.CoreOptions.BRANCH, args[i + 1]);
                FileStoreTable t = FileStoreTableFactory.create(LocalFileIO.create(), options);
                if (!args[i + 1].equals(t.coreOptions().branch())) {
                    throw new IllegalStateException("opened branch " + t.coreOptions().branch() + ", not " + args[i + 1]);
                }
                read(t, args[i + 2]);
            }
            return;
        }
        if (args[0].equals("changes")) {
            changes(args[1], args[2], Long.parseLong(args[3]));
            return;
        }
        if (args.length < 3 || args.length % 2 == 0) {
            throw new IllegalArgumentException("usage: read <table> <out> ... | write <kind> <table> ...");
        }
        for (int i = 1; i < args.length; i += 2) {
            if (args[0].equals("read")) {
                read(args[i], args[i + 1]);
            } else if (args[0].equals("write")) {
                write(args[i], args[i + 1]);
            } else if (args[0].equals("replay")) {
                replay(args[i], args[i + 1]);
            } else {
                throw new IllegalArgumentException("unknown command " + args[0]);
            }
        }
    }

    // ------------------------------------------------------------------ reading

    static void read(String table, String out) throws Exception {
        read(FileStoreTableFactory.create(LocalFileIO.create(), new Path(table)), out);
    }

    static void read(FileStoreTable t, String out) throws Exception {
        RowType rowType = t.rowType();
        ReadBuilder rb = t.newReadBuilder();
        try (Writer w = new BufferedWriter(new OutputStreamWriter(
                Files.newOutputStream(Paths.get(out)), StandardCharsets.UTF_8));
             RecordReader<InternalRow> reader = rb.newRead().createReader(rb.newScan().plan())) {
            RecordReader.RecordIterator<InternalRow> batch;
            while ((batch = reader.readBatch()) != null) {
                InternalRow row;
                while ((row = batch.next()) != null) {
                    if (row.getRowKind() == RowKind.DELETE || row.getRowKind() == RowKind.UPDATE_BEFORE) {
                        throw new IllegalStateException("batch read returned a retraction: " + row.getRowKind());
                    }
                    StringBuilder sb = new StringBuilder();
                    row(sb, row, rowType);
                    w.write(sb.toString());
                    w.write('\n');
                }
                batch.releaseBatch();
            }
        }
    }

    static void changes(String table, String out, long after) throws Exception {
        FileStoreTable t = FileStoreTableFactory.create(LocalFileIO.create(), new Path(table));
        Long latest = t.snapshotManager().latestSnapshotId();
        Map<String, String> start = new HashMap<>();
        start.put("scan.mode", "from-snapshot");
        start.put("scan.snapshot-id", String.valueOf(after + 1));
        t = t.copy(start);
        RowType rowType = t.rowType();
        ReadBuilder rb = t.newReadBuilder();
        org.apache.paimon.table.source.StreamTableScan scan = rb.newStreamScan();
        try (Writer w = new BufferedWriter(new OutputStreamWriter(
                Files.newOutputStream(Paths.get(out)), StandardCharsets.UTF_8))) {
            // Each plan covers the next snapshot(s); stop once the scan has passed the latest one.
            for (int round = 0; round < 10000; round++) {
                org.apache.paimon.table.source.TableScan.Plan plan = scan.plan();
                try (RecordReader<InternalRow> reader = rb.newRead().createReader(plan)) {
                    RecordReader.RecordIterator<InternalRow> batch;
                    while ((batch = reader.readBatch()) != null) {
                        InternalRow row;
                        while ((row = batch.next()) != null) {
                            StringBuilder sb = new StringBuilder();
                            row(sb, row, rowType);
                            w.write("{\"rowkind\":\"" + row.getRowKind().shortString() + "\"," + sb.substring(1));
                            w.write('\n');
                        }
                        batch.releaseBatch();
                    }
                }
                Long next = scan.checkpoint();
                if (latest == null || (next != null && next > latest)) break;
            }
        }
    }

    static void row(StringBuilder sb, InternalRow row, RowType type) {
        sb.append('{');
        List<DataField> fields = type.getFields();
        for (int i = 0; i < fields.size(); i++) {
            if (i > 0) sb.append(',');
            str(sb, fields.get(i).name());
            sb.append(':');
            value(sb, InternalRow.createFieldGetter(fields.get(i).type(), i).getFieldOrNull(row), fields.get(i).type());
        }
        sb.append('}');
    }

    static void value(StringBuilder sb, Object v, DataType type) {
        if (v == null) {
            sb.append("null");
            return;
        }
        switch (type.getTypeRoot()) {
            case CHAR:
            case VARCHAR:
                str(sb, v.toString());
                break;
            case BOOLEAN:
            case TINYINT:
            case SMALLINT:
            case INTEGER:
            case BIGINT:
                sb.append(v);
                break;
            case FLOAT:
                number(sb, (double) (Float) v);
                break;
            case DOUBLE:
                number(sb, (Double) v);
                break;
            case DECIMAL:
                str(sb, ((Decimal) v).toBigDecimal().toPlainString());
                break;
            case DATE:
                str(sb, LocalDate.ofEpochDay((Integer) v).toString());
                break;
            case TIME_WITHOUT_TIME_ZONE:
                sb.append(v);
                break;
            case TIMESTAMP_WITHOUT_TIME_ZONE:
            case TIMESTAMP_WITH_LOCAL_TIME_ZONE: {
                Timestamp ts = (Timestamp) v;
                sb.append(Math.multiplyExact(ts.getMillisecond(), 1000L) + ts.getNanoOfMillisecond() / 1000);
                break;
            }
            case BINARY:
            case VARBINARY:
                str(sb, Base64.getEncoder().encodeToString((byte[]) v));
                break;
            case ARRAY: {
                InternalArray a = (InternalArray) v;
                DataType et = ((ArrayType) type).getElementType();
                InternalArray.ElementGetter g = InternalArray.createElementGetter(et);
                sb.append('[');
                for (int i = 0; i < a.size(); i++) {
                    if (i > 0) sb.append(',');
                    value(sb, g.getElementOrNull(a, i), et);
                }
                sb.append(']');
                break;
            }
            case MAP: {
                InternalMap m = (InternalMap) v;
                MapType mt = (MapType) type;
                InternalArray.ElementGetter kg = InternalArray.createElementGetter(mt.getKeyType());
                InternalArray.ElementGetter vg = InternalArray.createElementGetter(mt.getValueType());
                InternalArray keys = m.keyArray(), values = m.valueArray();
                // Pairs sorted by the key's JSON text: map order is not part of a map's value.
                List<String[]> pairs = new ArrayList<>();
                for (int i = 0; i < m.size(); i++) {
                    StringBuilder k = new StringBuilder(), val = new StringBuilder();
                    value(k, kg.getElementOrNull(keys, i), mt.getKeyType());
                    value(val, vg.getElementOrNull(values, i), mt.getValueType());
                    pairs.add(new String[] {k.toString(), val.toString()});
                }
                pairs.sort((a, b) -> a[0].compareTo(b[0]));
                sb.append('[');
                for (int i = 0; i < pairs.size(); i++) {
                    if (i > 0) sb.append(',');
                    sb.append('[').append(pairs.get(i)[0]).append(',').append(pairs.get(i)[1]).append(']');
                }
                sb.append(']');
                break;
            }
            case ROW:
                row(sb, (InternalRow) v, (RowType) type);
                break;
            default:
                throw new UnsupportedOperationException("type " + type + " is not encoded by the oracle");
        }
    }

    static void number(StringBuilder sb, double d) {
        if (Double.isNaN(d) || Double.isInfinite(d)) {
            str(sb, Double.toString(d));
        } else {
            sb.append(Double.toString(d));
        }
    }

    static void str(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                sb.append('\\').append(c);
            } else if (c < 0x20) {
                sb.append(String.format("\\u%04x", (int) c));
            } else {
                sb.append(c);
            }
        }
        sb.append('"');
    }

    // ------------------------------------------------------------------ writing

    // Columns of every "all types" table written here (the Python tests know them too).
    static Schema.Builder allTypes() {
        return Schema.newBuilder()
                .column("id", DataTypes.INT())
                .column("part", DataTypes.STRING())
                .column("b", DataTypes.BOOLEAN())
                .column("i8", DataTypes.TINYINT())
                .column("i16", DataTypes.SMALLINT())
                .column("i64", DataTypes.BIGINT())
                .column("f32", DataTypes.FLOAT())
                .column("f64", DataTypes.DOUBLE())
                .column("d9", DataTypes.DECIMAL(9, 2))
                .column("d18", DataTypes.DECIMAL(18, 4))
                .column("d38", DataTypes.DECIMAL(38, 10))
                .column("s", DataTypes.STRING())
                .column("bin", DataTypes.BYTES())
                .column("day", DataTypes.DATE())
                .column("ts3", DataTypes.TIMESTAMP(3))
                .column("ts6", DataTypes.TIMESTAMP(6))
                .column("ltz", DataTypes.TIMESTAMP_WITH_LOCAL_TIME_ZONE(6))
                .column("arr", DataTypes.ARRAY(DataTypes.INT()))
                .column("m", DataTypes.MAP(DataTypes.STRING(), DataTypes.BIGINT()))
                .column("st", DataTypes.ROW(DataTypes.FIELD(100, "x", DataTypes.INT()),
                        DataTypes.FIELD(101, "y", DataTypes.STRING())));
    }

    // Row i of an "all types" table; every fifth row is null except id and part.
    static GenericRow allTypesRow(int i) {
        BinaryString part = BinaryString.fromString(i % 2 == 0 ? "even" : "odd");
        if (i % 5 == 4) {
            GenericRow r = new GenericRow(20);
            r.setField(0, i);
            r.setField(1, part);
            return r;
        }
        Map<Object, Object> m = new HashMap<>();
        m.put(BinaryString.fromString("k" + i), (long) i * 1000);
        m.put(BinaryString.fromString("z"), null);
        long micros = 1_700_000_000_000_000L + i * 1_234_567L;
        return GenericRow.of(
                i, part, i % 3 == 0, (byte) (i - 60), (short) (i * 300 - 20000), (long) i * 3_000_000_007L,
                (float) (i / 4.0), i == 3 ? Double.NaN : i * 1.1,
                Decimal.fromBigDecimal(new BigDecimal(i * 123).movePointLeft(2), 9, 2),
                Decimal.fromBigDecimal(new BigDecimal(i * 987654321L).movePointLeft(4), 18, 4),
                Decimal.fromBigDecimal(new BigDecimal("1234567890123456789012345678").add(new BigDecimal(i))
                        .movePointLeft(10), 38, 10),
                BinaryString.fromString("s\"" + i + "\u00e9"),
                new byte[] {(byte) i, 0, (byte) 255},
                (int) LocalDate.of(2024, 1, 1).toEpochDay() + i,
                Timestamp.fromEpochMillis(micros / 1000),
                Timestamp.fromMicros(micros),
                Timestamp.fromMicros(micros + 7),
                new GenericArray(new Object[] {i, null, -i}),
                new GenericMap(m),
                GenericRow.of(i * 2, BinaryString.fromString("y" + i)));
    }

    static FileStoreTable create(String path, Schema schema) throws Exception {
        FileIO io = LocalFileIO.create();
        new SchemaManager(io, new Path(path)).createTable(schema);
        return FileStoreTableFactory.create(io, new Path(path));
    }

    static void commit(FileStoreTable t, List<GenericRow> rows) throws Exception {
        if (t.coreOptions().bucket() == -1 && t.schema().crossPartitionUpdate()) {
            commitCrossPartition(t, rows);
            return;
        }
        BatchWriteBuilder wb = t.newBatchWriteBuilder();
        // Dynamic buckets (bucket=-1, primary key): Paimon's own assigner, one of one, gives each
        // row its bucket from the table's hash index; the writer adds the index files to the commit.
        org.apache.paimon.index.HashBucketAssigner assigner = null;
        org.apache.paimon.table.sink.RowPartitionKeyExtractor keys = null;
        if (t.coreOptions().bucket() == -1 && !t.primaryKeys().isEmpty()) {
            assigner = new org.apache.paimon.index.HashBucketAssigner(
                    t.snapshotManager(), "oracle-" + java.util.UUID.randomUUID(), t.store().newIndexFileHandler(),
                    1, 1, 0, t.coreOptions().dynamicBucketTargetRowNum());
            keys = new org.apache.paimon.table.sink.RowPartitionKeyExtractor(t.schema());
        }
        // Lookup compaction (deletion vectors) spills to local disk.
        try (BatchTableWrite w = (BatchTableWrite) wb.newWrite().withIOManager(IOManager.create(TMP));
             BatchTableCommit c = wb.newCommit()) {
            for (GenericRow r : rows) {
                if (assigner != null) {
                    w.write(r, assigner.assign(keys.partition(r), keys.trimmedPrimaryKey(r).hashCode()));
                } else {
                    w.write(r);
                }
            }
            c.commit(w.prepareCommit());
        }
    }

    /**
     * A cross-partition table (bucket=-1, a key without every partition column): Paimon's own
     * GlobalIndexAssigner, one of one, bootstrapped from the table's keys (IndexBootstrap), gives
     * each row its partition and bucket (a moved key's -D to its old place, a row into its old
     * partition, or nothing, by merge engine); its key index lives in RocksDB (pyspark's rocksdbjni).
     */
    static void commitCrossPartition(FileStoreTable t, List<GenericRow> rows) throws Exception {
        org.apache.paimon.data.serializer.InternalRowSerializer copier =
                new org.apache.paimon.data.serializer.InternalRowSerializer(t.rowType());
        List<Object[]> assigned = new ArrayList<>();
        IOManager io = IOManager.create(TMP);
        org.apache.paimon.crosspartition.GlobalIndexAssigner assigner =
                new org.apache.paimon.crosspartition.GlobalIndexAssigner(t);
        assigner.open(64L << 20, io, 1, 0, (row, bucket) -> assigned.add(new Object[] {copier.copy(row), bucket}));
        new org.apache.paimon.crosspartition.IndexBootstrap(t).bootstrap(1, 0, key -> {
            try {
                assigner.bootstrapKey(key);
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        });
        for (GenericRow r : rows) assigner.processInput(r);
        assigner.endBoostrap(true);
        assigner.close();
        BatchWriteBuilder wb = t.newBatchWriteBuilder();
        try (BatchTableWrite w = (BatchTableWrite) wb.newWrite().withIOManager(io);
             BatchTableCommit c = wb.newCommit()) {
            for (Object[] rowAndBucket : assigned) w.write((InternalRow) rowAndBucket[0], (Integer) rowAndBucket[1]);
            c.commit(w.prepareCommit());
        }
    }

    static List<GenericRow> rows(int from, int to) {
        List<GenericRow> out = new ArrayList<>();
        for (int i = from; i < to; i++) out.add(allTypesRow(i));
        return out;
    }

    static void write(String kind, String path) throws Exception {
        switch (kind) {
            case "parquet":
            case "orc":
            case "avro": {
                // Append table (unaware bucket), partitioned, two commits.
                FileStoreTable t = create(path, allTypes().partitionKeys("part")
                        .option("bucket", "-1").option("file.format", kind).build());
                commit(t, rows(0, 12));
                commit(t, rows(12, 20));
                break;
            }
            case "parquet-flat": {
                // Not partitioned, one commit: for comparing Parquet layouts.
                FileStoreTable t = create(path, allTypes().option("bucket", "-1").build());
                commit(t, rows(0, 10));
                break;
            }
            case "pk": {
                // Primary-key table (fixed buckets, deduplicate): updates and a delete merged on read.
                FileStoreTable t = create(path, allTypes().primaryKey("id").option("bucket", "2").build());
                commit(t, rows(0, 15));
                List<GenericRow> changes = rows(20, 25);
                for (int k = 0; k < changes.size(); k++) changes.get(k).setField(0, k * 2); // update ids 0,2,..8
                GenericRow gone = allTypesRow(7);
                gone.setRowKind(RowKind.DELETE);
                changes.add(gone);
                commit(t, changes);
                break;
            }
            case "dv": {
                // Primary-key table with deletion vectors: rows replaced by later commits are
                // marked deleted in older files (compaction writes the vectors), not rewritten.
                FileStoreTable t = create(path, Schema.newBuilder()
                        .column("id", DataTypes.INT()).column("v", DataTypes.STRING())
                        .primaryKey("id").option("bucket", "1").option("deletion-vectors.enabled", "true")
                        .build());
                List<GenericRow> first = new ArrayList<>();
                for (int i = 0; i < 100; i++) first.add(GenericRow.of(i, BinaryString.fromString("v1-" + i)));
                commit(t, first);
                fullCompact(t);
                List<GenericRow> second = new ArrayList<>();
                for (int i = 0; i < 100; i += 10) second.add(GenericRow.of(i, BinaryString.fromString("v2-" + i)));
                GenericRow gone = GenericRow.of(5, BinaryString.fromString("v1-5"));
                gone.setRowKind(RowKind.DELETE);
                second.add(gone);
                commit(t, second);
                break;
            }
            case "evolved": {
                // Append table whose columns are renamed, widened and added between commits.
                FileStoreTable t = create(path, Schema.newBuilder()
                        .column("id", DataTypes.INT()).column("old_name", DataTypes.STRING())
                        .column("n", DataTypes.INT()).option("bucket", "-1").build());
                List<GenericRow> first = new ArrayList<>();
                for (int i = 0; i < 5; i++) first.add(GenericRow.of(i, BinaryString.fromString("a" + i), i * 10));
                commit(t, first);
                new SchemaManager(t.fileIO(), new Path(path)).commitChanges(
                        SchemaChange.renameColumn("old_name", "new_name"),
                        SchemaChange.updateColumnType("n", DataTypes.BIGINT()),
                        SchemaChange.addColumn("extra", DataTypes.DOUBLE()));
                t = FileStoreTableFactory.create(t.fileIO(), new Path(path));
                List<GenericRow> second = new ArrayList<>();
                for (int i = 5; i < 8; i++) {
                    second.add(GenericRow.of(i, BinaryString.fromString("b" + i), (long) i * 10_000_000_000L, i + 0.5));
                }
                commit(t, second);
                break;
            }
            case "layout": {
                // Types beyond Spark's: how Paimon lays out each in Parquet (docs/types.md).
                // (No TIME column: Spark has no type to read it into.)
                FileStoreTable t = create(path, Schema.newBuilder()
                        .column("ts0", DataTypes.TIMESTAMP(0)).column("ts9", DataTypes.TIMESTAMP(9))
                        .column("ltz3", DataTypes.TIMESTAMP_WITH_LOCAL_TIME_ZONE(3))
                        .column("ltz9", DataTypes.TIMESTAMP_WITH_LOCAL_TIME_ZONE(9))
                        .column("c", DataTypes.CHAR(3))
                        .column("fb", DataTypes.BINARY(4)).column("d1", DataTypes.DECIMAL(1, 0))
                        .column("d10", DataTypes.DECIMAL(10, 0)).column("d19", DataTypes.DECIMAL(19, 0))
                        .column("aa", DataTypes.ARRAY(DataTypes.ARRAY(DataTypes.INT())))
                        .column("mr", DataTypes.MAP(DataTypes.INT(), DataTypes.ROW(DataTypes.FIELD(9, "q", DataTypes.INT()))))
                        .option("bucket", "-1").build());
                for (int k = 0; k < 2; k++) { // two commits: two files that lakesink.compact can merge
                    commit(t, List.of(GenericRow.of(
                            Timestamp.fromEpochMillis(1000 * (1 + k)), Timestamp.fromEpochMillis(1 + k, 123000), // whole micros: Spark reads micros
                            Timestamp.fromEpochMillis(5 + k), Timestamp.fromEpochMillis(5 + k, 999000),
                            BinaryString.fromString("abc"), new byte[] {1, 2, 3, (byte) k},
                            Decimal.fromUnscaledLong(7 - k, 1, 0), Decimal.fromUnscaledLong(1234567890L + k, 10, 0),
                            Decimal.fromBigDecimal(new BigDecimal("1234567890123456789").add(BigDecimal.valueOf(k)), 19, 0),
                            new GenericArray(new Object[] {new GenericArray(new Object[] {1, k})}),
                            new GenericMap(Map.of(1, GenericRow.of(2 + k))))));
                }
                break;
            }
            case "nanos": {
                // Only precision 7-9 timestamps (INT96 in Paimon's Parquet), two commits.
                FileStoreTable t = create(path, Schema.newBuilder().column("id", DataTypes.INT())
                        .column("ts9", DataTypes.TIMESTAMP(9))
                        .column("ltz9", DataTypes.TIMESTAMP_WITH_LOCAL_TIME_ZONE(9))
                        .option("bucket", "-1").build());
                for (int k = 0; k < 2; k++) {
                    commit(t, List.of(GenericRow.of(k, Timestamp.fromEpochMillis(1_700_000_000_000L + k, 123000),
                            Timestamp.fromEpochMillis(-86_400_000L * k, 7000)), GenericRow.of(10 + k, null, null)));
                }
                break;
            }
            case "null-structs": {
                // Structs whose fields are all null, top level and inside an array: Paimon's
                // own round trip shows how its Parquet reader tells them from null structs.
                FileStoreTable t = create(path, Schema.newBuilder()
                        .column("id", DataTypes.INT())
                        .column("st", DataTypes.ROW(DataTypes.FIELD(1, "x", DataTypes.INT())))
                        .column("arr", DataTypes.ARRAY(DataTypes.ROW(DataTypes.FIELD(2, "x", DataTypes.INT()))))
                        .option("bucket", "-1").build());
                commit(t, List.of(
                        GenericRow.of(1, GenericRow.of((Object) null),
                                new GenericArray(new Object[] {GenericRow.of((Object) null), null})),
                        GenericRow.of(2, null, null)));
                break;
            }
            case "tagged": {
                // Two snapshots; tag "first" names snapshot 1.
                FileStoreTable t = create(path, Schema.newBuilder()
                        .column("id", DataTypes.INT()).column("v", DataTypes.STRING()).option("bucket", "-1").build());
                commit(t, List.of(GenericRow.of(1, BinaryString.fromString("one")),
                        GenericRow.of(2, BinaryString.fromString("two"))));
                t.createTag("first", 1L);
                commit(t, List.of(GenericRow.of(3, BinaryString.fromString("three"))));
                break;
            }
            default:
                throw new IllegalArgumentException("unknown table kind " + kind);
        }
    }

    @SuppressWarnings("unchecked")
    static void replay(String specFile, String path) throws Exception {
        Map<String, Object> spec = org.apache.paimon.utils.JsonSerdeUtil.fromJson(
                new String(Files.readAllBytes(Paths.get(specFile)), StandardCharsets.UTF_8), Map.class);
        Schema.Builder b = Schema.newBuilder();
        List<String> types = new ArrayList<>();
        for (Object c : (List<Object>) spec.get("columns")) {
            List<Object> col = (List<Object>) c;
            String type = (String) col.get(1);
            types.add(type);
            b.column((String) col.get(0), replayType(type));
        }
        b.primaryKey((List<String>) spec.get("primary_key"));
        b.partitionKeys((List<String>) spec.get("partition"));
        for (Map.Entry<String, Object> e : ((Map<String, Object>) spec.get("options")).entrySet()) {
            b.option(e.getKey(), String.valueOf(e.getValue()));
        }
        // "continue": true writes into the existing table at `path` (its schema as it is).
        FileStoreTable t = Boolean.TRUE.equals(spec.get("continue"))
                ? FileStoreTableFactory.create(LocalFileIO.create(), new Path(path))
                : create(path, b.build());
        for (Object batch : (List<Object>) spec.get("batches")) {
            List<GenericRow> rows = new ArrayList<>();
            for (Object r : (List<Object>) batch) {
                List<Object> kindAndValues = (List<Object>) r;
                List<Object> values = (List<Object>) kindAndValues.get(1);
                GenericRow row = new GenericRow(RowKind.fromShortString((String) kindAndValues.get(0)), values.size());
                for (int i = 0; i < values.size(); i++) row.setField(i, replayValue(types.get(i), values.get(i)));
                rows.add(row);
            }
            commit(t, rows);
            if (Boolean.TRUE.equals(spec.get("full_compact_each"))) fullCompactAll(t);
        }
    }

    /** A full compaction of every bucket of every partition, one commit (full-compaction changelog). */
    static void fullCompactAll(FileStoreTable t) throws Exception {
        BatchWriteBuilder wb = t.newBatchWriteBuilder();
        try (BatchTableWrite w = (BatchTableWrite) wb.newWrite().withIOManager(IOManager.create(TMP));
             BatchTableCommit c = wb.newCommit()) {
            for (org.apache.paimon.manifest.PartitionEntry p : t.newSnapshotReader().partitionEntries()) {
                for (int b = 0; b < t.coreOptions().bucket(); b++) w.compact(p.partition(), b, true);
            }
            c.commit(w.prepareCommit());
        }
    }

    static DataType replayType(String type) {
        if (type.startsWith("DECIMAL(")) {
            String[] ps = type.substring(8, type.length() - 1).split(",");
            return DataTypes.DECIMAL(Integer.parseInt(ps[0].trim()), Integer.parseInt(ps[1].trim()));
        }
        switch (type) {
            case "INT": return DataTypes.INT();
            case "BIGINT": return DataTypes.BIGINT();
            case "DOUBLE": return DataTypes.DOUBLE();
            case "BOOLEAN": return DataTypes.BOOLEAN();
            case "STRING": return DataTypes.STRING();
            default: throw new IllegalArgumentException("replay: unsupported type " + type);
        }
    }

    static Object replayValue(String type, Object v) {
        if (v == null) return null;
        if (type.startsWith("DECIMAL(")) {
            DecimalType d = (DecimalType) replayType(type);
            return Decimal.fromBigDecimal(new BigDecimal(v.toString()), d.getPrecision(), d.getScale());
        }
        switch (type) {
            case "INT": return ((Number) v).intValue();
            case "BIGINT": return ((Number) v).longValue();
            case "DOUBLE": return ((Number) v).doubleValue();
            case "BOOLEAN": return (Boolean) v;
            default: return BinaryString.fromString((String) v);
        }
    }

    static void fullCompact(FileStoreTable t) throws Exception {
        BatchWriteBuilder wb = t.newBatchWriteBuilder();
        try (BatchTableWrite w = (BatchTableWrite) wb.newWrite().withIOManager(IOManager.create(TMP));
             BatchTableCommit c = wb.newCommit()) {
            w.compact(BinaryRow.EMPTY_ROW, 0, true);
            c.commit(w.prepareCommit());
        }
    }
}
