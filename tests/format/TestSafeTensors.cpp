// Tests for SafeTensors: round trips of every dtype, the writer's layout promises, refusal of malformed
// files, zero-copy loading, and agreement with an independent Python implementation in both directions.

#include "format/SafeTensors.h"

#include "DTypeSamples.h"
#include "TestSupport.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRandomGenerator>
#include <QStandardPaths>
#include <QTest>
#include <QtEndian>

using namespace gleaner;
using namespace Qt::StringLiterals;

namespace {

using test::DTypeSample;

QByteArray le64(quint64 value)
{
    QByteArray bytes(8, '\0');
    qToLittleEndian(value, bytes.data());
    return bytes;
}

// A file around `header` with `dataBytes` zero bytes of data.
QByteArray fileWith(const QByteArray& header, qsizetype dataBytes = 0)
{
    return le64(quint64(header.size())) + header + QByteArray(dataBytes, '\0');
}

qint64 dataStart(const QByteArray& file)
{
    return 8 + qint64(qFromLittleEndian<quint64>(file.constData()));
}

struct CheckerRun
{
    int exitCode = -1;
    QString output;
};

// Runs tests/tools/safetensors_check.py; python3 is a build dependency, so its absence fails the test.
CheckerRun runChecker(const QStringList& arguments)
{
    CheckerRun run;
    const QString python = QStandardPaths::findExecutable(u"python3"_s);
    if (python.isEmpty()) {
        run.output = u"python3 is not on PATH; it is a build dependency (apt install python3)"_s;
        return run;
    }
    QProcess process;
    process.setProcessChannelMode(QProcess::MergedChannels);
    process.start(python,
                  QStringList{test::sourceDir() + u"/tests/tools/safetensors_check.py"_s} + arguments);
    if (!process.waitForFinished(60'000) || process.exitStatus() != QProcess::NormalExit) {
        run.output = u"safetensors_check.py did not finish: "_s + process.errorString();
        return run;
    }
    run.exitCode = process.exitCode();
    run.output = QString::fromUtf8(process.readAll());
    return run;
}

} // namespace

class TestSafeTensors : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void roundTripsEveryDType_data();
    void roundTripsEveryDType();
    void roundTripsMetadataAndUnusualNames();
    void emptyBundleIsValid();
    void writerAlignsHeaderAndTensors();
    void savesAndLoadsThroughAFile();
    void loadErrorsNameThePath();
    void refusesBundlesItCannotWrite();
    void loadSharesTheFileBuffer();
    void rejectsMalformedFiles_data();
    void rejectsMalformedFiles();
    void rejectsEveryTruncation();
    void survivesCorruptedBytes();
    void pythonReaderAcceptsOurFile();
    void readsThePythonWritersFile();
};

void TestSafeTensors::roundTripsEveryDType_data()
{
    QTest::addColumn<int>("index");
    const QList<DTypeSample> all = test::dtypeSamples();
    for (qsizetype i = 0; i < all.size(); ++i)
        QTest::newRow(qPrintable(all[i].name)) << int(i);
}

void TestSafeTensors::roundTripsEveryDType()
{
    QFETCH(int, index);
    const DTypeSample sample = test::dtypeSamples().at(index);
    TensorBundle bundle;
    // A 3-byte tensor first, so the writer has to move the sample to keep it aligned.
    QVERIFY(bundle.add(u"odd"_s, DType::U8, {3}, QByteArray("xyz")).ok());
    const QByteArray bytes = test::encodeValues(sample.dtype, sample.values);
    QVERIFY(bundle.add(sample.name, sample.dtype, sample.shape, bytes).ok());

    const QByteArray file = SafeTensors::serialize(bundle);
    const auto parsed = SafeTensors::parse(file);
    QVERIFY2(parsed.ok(), qPrintable(parsed.error()));
    QCOMPARE(parsed->size(), 2);
    QCOMPARE(parsed->entries().at(1).name, sample.name);
    const TensorEntry& entry = parsed->entries().at(1);
    QCOMPARE(parsed->data(entry).toByteArray(), bytes);
    const QString difference = test::compareSample(*parsed, sample);
    QVERIFY2(difference.isEmpty(), qPrintable(difference));
    QCOMPARE((entry.offset - dataStart(file)) % dtypeSize(sample.dtype), 0);
    QCOMPARE(parsed->data(*parsed->find(u"odd")).toByteArray(), QByteArray("xyz"));
}

void TestSafeTensors::roundTripsMetadataAndUnusualNames()
{
    TensorBundle bundle;
    const QStringList names{
        u"a\"b"_s, u"back\\slash"_s, u"\u00fcml\u00e4ut \U0001F600"_s, u"new\nline\ttab\x01"_s,
        u""_s,     u"__metadata"_s};
    for (const QString& name : names)
        QVERIFY(bundle.add(name, DType::I16, {1}, QByteArray("\x01\x02", 2)).ok());
    bundle.setMetadata(u"format"_s, u"pt"_s);
    bundle.setMetadata(u"quote \" backslash \\ control \x1f"_s, u"\u00e9\U0001F600\n"_s);
    bundle.setMetadata(u"empty"_s, u""_s);

    const auto parsed = SafeTensors::parse(SafeTensors::serialize(bundle));
    QVERIFY2(parsed.ok(), qPrintable(parsed.error()));
    QStringList parsedNames;
    for (const TensorEntry& entry : parsed->entries())
        parsedNames << entry.name;
    QCOMPARE(parsedNames, names); // header order is the bundle's order
    QCOMPARE(parsed->metadata(), bundle.metadata());
}

void TestSafeTensors::emptyBundleIsValid()
{
    const QByteArray file = SafeTensors::serialize(TensorBundle());
    QCOMPARE(file, le64(8) + QByteArray("{}      "));
    const auto parsed = SafeTensors::parse(file);
    QVERIFY2(parsed.ok(), qPrintable(parsed.error()));
    QVERIFY(parsed->isEmpty());
    QVERIFY(parsed->metadata().isEmpty());
}

void TestSafeTensors::writerAlignsHeaderAndTensors()
{
    struct Spec
    {
        const char16_t* name;
        DType dtype;
        QList<qint64> shape;
        qint64 expectedOffset; // largest elements first, otherwise in the bundle's order
    };
    const QList<Spec> specs{{u"a", DType::U8, {3}, 28},        {u"b", DType::F64, {}, 0},
                            {u"c", DType::I16, {1, 3}, 20},    {u"d", DType::F32, {1}, 16},
                            {u"e", DType::Bool, {1}, 31},      {u"f", DType::I64, {1}, 8},
                            {u"g", DType::BF16, {1, 1, 1}, 26}};
    TensorBundle bundle;
    for (const Spec& spec : specs)
        QVERIFY(bundle.addZeroed(QString::fromUtf16(spec.name), spec.dtype, spec.shape));
    const QByteArray file = SafeTensors::serialize(bundle);
    const qint64 start = dataStart(file);
    QCOMPARE(start % 8, 0);
    QCOMPARE(file.size() - start, 32);
    const QByteArray header = file.mid(8, start - 8);
    const QByteArray json = header.trimmed();
    QVERIFY(json.endsWith('}'));
    QCOMPARE(header.mid(json.size()), QByteArray(header.size() - json.size(), ' ')); // padded with spaces
    QVERIFY2(!json.contains(' '), json.constData());                                 // compact
    QVERIFY(!json.contains("__metadata__"));                                         // none when empty

    const auto parsed = SafeTensors::parse(file);
    QVERIFY2(parsed.ok(), qPrintable(parsed.error()));
    QCOMPARE(parsed->size(), specs.size());
    for (qsizetype i = 0; i < specs.size(); ++i) {
        const TensorEntry& entry = parsed->entries().at(i);
        QCOMPARE(entry.name, QString::fromUtf16(specs[i].name));
        QCOMPARE(entry.offset - start, specs[i].expectedOffset);
        QCOMPARE((entry.offset - start) % dtypeSize(entry.dtype), 0);
        const auto address = reinterpret_cast<quintptr>(parsed->data(entry).data());
        QCOMPARE(address % quintptr(dtypeSize(entry.dtype)), quintptr(0));
    }
}

void TestSafeTensors::savesAndLoadsThroughAFile()
{
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(u"bundle.safetensors"_s);
    QVERIFY(gleaner::test::writeFile(path, "old contents"));
    const TensorBundle bundle = test::sampleBundle();
    const Status saved = SafeTensors::save(path, bundle);
    QVERIFY2(saved.ok(), qPrintable(saved.error()));
    QCOMPARE(gleaner::test::readFile(path), SafeTensors::serialize(bundle)); // streaming writes the same bytes
    QCOMPARE(QDir(dir->path()).entryList(QDir::Files), QStringList{u"bundle.safetensors"_s}); // no temp file

    const auto loaded = SafeTensors::load(path);
    QVERIFY2(loaded.ok(), qPrintable(loaded.error()));
    QCOMPARE(loaded->size(), bundle.size());
    for (qsizetype i = 0; i < bundle.size(); ++i)
        QCOMPARE(loaded->entries().at(i).name, bundle.entries().at(i).name);
    for (const DTypeSample& sample : test::dtypeSamples()) {
        const QString difference = test::compareSample(*loaded, sample);
        QVERIFY2(difference.isEmpty(), qPrintable(difference));
    }
    QCOMPARE(loaded->metadata(), bundle.metadata());
}

void TestSafeTensors::loadErrorsNameThePath()
{
    const auto dir = test::scratchDir();
    const QString missing = dir->filePath(u"missing.safetensors"_s);
    const auto notFound = SafeTensors::load(missing);
    QVERIFY(!notFound.ok());
    QVERIFY2(notFound.error().startsWith(missing + u": cannot open"_s), qPrintable(notFound.error()));

    const auto folder = SafeTensors::load(dir->path());
    QVERIFY(!folder.ok());
    QVERIFY2(folder.error().contains(u"is a folder"_s), qPrintable(folder.error()));

    const QString shortFile = dir->filePath(u"short.safetensors"_s);
    QVERIFY(gleaner::test::writeFile(shortFile, QByteArray(7, '\0')));
    const auto tooShort = SafeTensors::load(shortFile);
    QVERIFY(!tooShort.ok());
    QVERIFY2(tooShort.error().startsWith(shortFile + u": the file is 7 bytes"_s),
             qPrintable(tooShort.error()));

    const QString inMissingFolder = dir->filePath(u"no/such/folder/out.safetensors"_s);
    const Status notSaved = SafeTensors::save(inMissingFolder, test::sampleBundle());
    QVERIFY(!notSaved.ok());
    QVERIFY2(notSaved.error().startsWith(inMissingFolder + u": "_s), qPrintable(notSaved.error()));
}

void TestSafeTensors::refusesBundlesItCannotWrite()
{
    // TensorBundle::add refuses the reserved name; a bundle adopted from a buffer can still carry it.
    TensorBundle refused;
    const Status addReserved = refused.add(u"__metadata__"_s, DType::U8, {1}, QByteArray("x"));
    QVERIFY(!addReserved.ok());
    QVERIFY2(addReserved.error().contains(u"reserved"_s), qPrintable(addReserved.error()));
    const TensorEntry meta{u"__metadata__"_s, DType::U8, {1}, 0, 1};
    const TensorBundle reserved = TensorBundle::fromBuffer(QByteArray("x"), {meta});
    QVERIFY(SafeTensors::serialize(reserved).isEmpty());
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(u"kept.safetensors"_s);
    QVERIFY(gleaner::test::writeFile(path, "previous file"));
    const Status saved = SafeTensors::save(path, reserved);
    QVERIFY(!saved.ok());
    QVERIFY2(saved.error().contains(u"reserved for the file's metadata"_s), qPrintable(saved.error()));
    QCOMPARE(gleaner::test::readFile(path), QByteArray("previous file")); // a refused save leaves the old file alone

    const TensorEntry past{u"w"_s, DType::F32, {2}, 0, 8};
    const Status outside = SafeTensors::checkWritable(TensorBundle::fromBuffer(QByteArray(4, '\0'), {past}));
    QVERIFY2(outside.error().contains(u"outside the 4-byte buffer"_s), qPrintable(outside.error()));
    const TensorEntry w{u"w"_s, DType::F32, {1}, 0, 4};
    const Status twice = SafeTensors::checkWritable(TensorBundle::fromBuffer(QByteArray(8, '\0'), {w, w}));
    QVERIFY2(twice.error().contains(u"appears twice"_s), qPrintable(twice.error()));
    const TensorEntry wrongSize{u"w"_s, DType::F32, {3}, 0, 8};
    const Status mismatch =
        SafeTensors::checkWritable(TensorBundle::fromBuffer(QByteArray(16, '\0'), {wrongSize}));
    QVERIFY2(mismatch.error().contains(u"does not match its 8 bytes"_s), qPrintable(mismatch.error()));
    QVERIFY(SafeTensors::checkWritable(test::sampleBundle()).ok());
}

void TestSafeTensors::loadSharesTheFileBuffer()
{
    constexpr qint64 kCount = 5 * 1024 * 1024; // 20 MiB of F32
    TensorBundle big;
    auto* values = reinterpret_cast<float*>(big.addZeroed(u"weights"_s, DType::F32, {kCount}));
    QVERIFY(values);
    for (qint64 i = 0; i < kCount; ++i)
        values[i] = float(i % 1000);
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(u"big.safetensors"_s);
    QVERIFY(SafeTensors::save(path, big).ok());

    const auto loaded = SafeTensors::load(path);
    QVERIFY2(loaded.ok(), qPrintable(loaded.error()));
    const QByteArray& buffer = loaded->buffer();
    QCOMPARE(qint64(buffer.size()), QFileInfo(path).size()); // the bundle's buffer is the file as read
    const QByteArrayView tensor = loaded->data(*loaded->find(u"weights"));
    QCOMPARE(tensor.size(), kCount * 4);
    QVERIFY(tensor.data() > buffer.constData());
    QVERIFY(tensor.data() + tensor.size() == buffer.constData() + buffer.size()); // a view, not a copy
    QCOMPARE(loaded->values<float>(*loaded->find(u"weights"))[kCount - 1], float((kCount - 1) % 1000));

    // parse() adopts the caller's array through implicit sharing rather than copying it.
    const QByteArray file = SafeTensors::serialize(big);
    const auto parsed = SafeTensors::parse(file);
    QVERIFY(parsed.ok());
    QCOMPARE(parsed->buffer().constData(), file.constData());
}

void TestSafeTensors::rejectsMalformedFiles_data()
{
    QTest::addColumn<QByteArray>("file");
    QTest::addColumn<QString>("message");
    auto row = [](const char* tag, const QByteArray& file, const char16_t* message) {
        QTest::newRow(tag) << file << QString::fromUtf16(message);
    };
    // One valid-looking F32 [2] entry to build files around.
    const QByteArray w = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
    auto tensor = [](const char* body) { return fileWith(QByteArray(R"({"w":)") + body + '}', 8); };

    row("empty file", {}, u"the file is 0 bytes, shorter than the 8-byte header length");
    row("7 bytes", QByteArray(7, '\0'), u"the file is 7 bytes");
    row("length past end", le64(100) + "{}", u"header length 100 runs past the end of the file (2 bytes");
    row("length over limit", le64(100'000'001) + "{}",
        u"header length 100000001 is over the limit of 100000000");
    row("length 2^64-1", le64(~quint64(0)) + "{}", u"is over the limit");
    row("zero-length header", le64(0), u"does not start with '{'");
    row("header is an array", fileWith("[]"), u"does not start with '{'");
    row("leading space", fileWith(" {}"), u"does not start with '{'");
    row("invalid UTF-8", fileWith("{\"w\xff\":1}"), u"not valid UTF-8");
    row("overlong UTF-8", fileWith("{\"\xc0\xaf\":1}"), u"not valid UTF-8");
    row("UTF-8 surrogate", fileWith("{\"\xed\xa0\x80\":1}"), u"not valid UTF-8");
    row("invalid JSON", fileWith("{\"w\":"), u"the header is not valid JSON: ");
    row("NUL padding", fileWith(QByteArray("{}\0\0", 4)), u"garbage at the end of the document at byte 2");
    row("entry not an object", fileWith(R"({"w":[1]})"), u"tensor \"w\": entry is not a JSON object");
    row("no dtype", tensor(R"({"shape":[2],"data_offsets":[0,8]})"), u"tensor \"w\": has no \"dtype\"");
    row("dtype not a string", tensor(R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})"),
        u"\"dtype\" is not a string");
    row("unknown dtype Q4", tensor(R"({"dtype":"Q4","shape":[2],"data_offsets":[0,8]})"),
        u"unknown dtype \"Q4\"");
    row("lower-case dtype", tensor(R"({"dtype":"f32","shape":[2],"data_offsets":[0,8]})"),
        u"unknown dtype \"f32\"");
    row("no shape", tensor(R"({"dtype":"F32","data_offsets":[0,8]})"), u"tensor \"w\": has no \"shape\"");
    row("shape not an array", tensor(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})"),
        u"\"shape\" is not an array");
    row("negative dimension", tensor(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"),
        u"shape dimension 0 is negative (-2)");
    row("fractional dimension", tensor(R"({"dtype":"F32","shape":[1,2.5],"data_offsets":[0,8]})"),
        u"shape dimension 1 (2.5) is not a whole number");
    row("dimension as string", tensor(R"({"dtype":"F32","shape":["2"],"data_offsets":[0,8]})"),
        u"shape dimension 0 is not a number");
    row("dimension past 2^63",
        tensor(R"({"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]})"),
        u"is not a whole number that fits in 64 bits");
    row("no data_offsets", tensor(R"({"dtype":"F32","shape":[2]})"), u"has no \"data_offsets\"");
    row("data_offsets not an array", tensor(R"({"dtype":"F32","shape":[2],"data_offsets":8})"),
        u"\"data_offsets\" is not an array");
    row("three data_offsets", tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4,8]})"),
        u"\"data_offsets\" holds 3 values instead of [BEGIN, END]");
    row("negative offset", tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})"),
        u"data_offsets BEGIN is negative (-8)");
    row("BEGIN after END", tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"),
        u"data_offsets [8, 0] end before they begin");
    row("offsets past the buffer", tensor(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"),
        u"tensor \"w\": data_offsets [0, 16] run past the end of the 8-byte data buffer");
    row("element count overflow",
        tensor(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})"),
        u"shape [4294967296, 4294967296] has more elements than 64 bits can count");
    row("byte size overflow", tensor(R"({"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]})"),
        u"of F64 needs more bytes than 64 bits can count");
    row("size does not match", tensor(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"),
        u"tensor \"w\": shape [3] holds 3 F32 values = 12 bytes, but data_offsets [0, 8] span 8");
    row("overlap", fileWith("{" + w + R"(,"v":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
        u"tensor \"v\": data_offsets [4, 8] overlap tensor \"w\", which ends at 8");
    row("hole at the start", fileWith(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
        u"leave a hole of 4 bytes after the start of the data buffer");
    row("hole between", fileWith("{" + w + R"(,"v":{"dtype":"U8","shape":[1],"data_offsets":[10,11]}})", 11),
        u"tensor \"v\": data_offsets [10, 11] leave a hole of 2 bytes after tensor \"w\"");
    row("trailing bytes", fileWith("{" + w + "}", 12),
        u"the data buffer holds 12 bytes but the tensors cover 8");
    row("data without tensors", fileWith("{}", 4), u"4 trailing bytes");
    row("metadata not an object", fileWith(R"({"__metadata__":["a"]})"),
        u"\"__metadata__\" is not a JSON object");
    row("metadata value not a string", fileWith(R"({"__metadata__":{"epoch":3}})"),
        u"\"__metadata__\" value of \"epoch\" is not a string");
    row("duplicate name", fileWith("{" + w + "," + w + "}", 8), u"the header lists \"w\" more than once");
    row("duplicate escaped name",
        fileWith("{" + w + R"(,"\u0077":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
        u"the header lists \"w\" more than once");
    row("unpaired surrogate name", fileWith(R"({"\ud800":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})"),
        u"unpaired surrogate");
}

void TestSafeTensors::rejectsMalformedFiles()
{
    QFETCH(QByteArray, file);
    QFETCH(QString, message);
    const auto parsed = SafeTensors::parse(file);
    QVERIFY2(!parsed.ok(), "a malformed file was accepted");
    QVERIFY2(parsed.error().contains(message),
             qPrintable(u"message \"%1\" does not contain \"%2\""_s.arg(parsed.error(), message)));
}

void TestSafeTensors::rejectsEveryTruncation()
{
    const QByteArray file = SafeTensors::serialize(test::sampleBundle());
    QVERIFY(SafeTensors::parse(file).ok());
    for (qsizetype size = 0; size < file.size(); ++size)
        QVERIFY2(!SafeTensors::parse(file.left(size)).ok(),
                 qPrintable(u"prefix of %1 bytes accepted"_s.arg(size)));
}

void TestSafeTensors::survivesCorruptedBytes()
{
    // Not a fuzzer, but a cheap net under one: random damage must give an error or a bundle that is sound.
    const QByteArray original = SafeTensors::serialize(test::sampleBundle());
    const qsizetype headerEnd = qsizetype(dataStart(original));
    QRandomGenerator random(20240611);
    int accepted = 0;
    for (int round = 0; round < 4000; ++round) {
        QByteArray file = original;
        const int flips = 1 + int(random.bounded(3));
        for (int i = 0; i < flips; ++i) {
            const bool inHeader = random.bounded(10) < 8; // the header is where the parser's logic is
            const auto at =
                qsizetype(inHeader ? random.bounded(qint64(headerEnd)) : random.bounded(qint64(file.size())));
            file[at] = char(random.bounded(256));
        }
        const auto parsed = SafeTensors::parse(file);
        if (!parsed.ok()) {
            QVERIFY(!parsed.error().isEmpty());
            continue;
        }
        ++accepted;
        for (const TensorEntry& entry : parsed->entries()) {
            QVERIFY(entry.offset >= 0 && entry.offset + entry.byteSize <= parsed->buffer().size());
            QCOMPARE(entry.byteSize, entry.elementCount() * dtypeSize(entry.dtype));
        }
        QVERIFY2(SafeTensors::checkWritable(*parsed).ok(), "a parsed bundle must be writable again");
    }
    QVERIFY(accepted > 0); // damage to tensor bytes or to a name leaves a valid file
}

void TestSafeTensors::pythonReaderAcceptsOurFile()
{
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(u"ours.safetensors"_s);
    const TensorBundle bundle = test::sampleBundle();
    QVERIFY(SafeTensors::save(path, bundle).ok());

    QJsonArray tensors;
    for (const DTypeSample& sample : test::dtypeSamples()) {
        QJsonArray shape;
        for (qint64 dim : sample.shape)
            shape.append(dim);
        tensors.append(QJsonObject{{u"name"_s, sample.name},
                                   {u"dtype"_s, dtypeName(sample.dtype)},
                                   {u"shape"_s, shape},
                                   {u"values"_s, QJsonArray::fromStringList(sample.values)}});
    }
    QJsonObject metadata;
    for (auto it = bundle.metadata().begin(); it != bundle.metadata().end(); ++it)
        metadata.insert(it.key(), it.value());
    QJsonObject expected{{u"tensors"_s, tensors}, {u"metadata"_s, metadata}};
    const QString expectedPath = dir->filePath(u"expected.json"_s);
    QVERIFY(gleaner::test::writeFile(expectedPath, QJsonDocument(expected).toJson()));

    const CheckerRun good = runChecker({path, expectedPath, u"--gleaner"_s});
    QVERIFY2(good.exitCode == 0, qPrintable(good.output));

    // The checker must be able to fail: one changed expectation and one damaged byte are both caught.
    QJsonArray changed = expected[u"tensors"_s].toArray();
    QJsonObject f32 = changed[9].toObject();
    QCOMPARE(f32[u"name"_s].toString(), u"F32"_s);
    f32[u"values"_s] = QJsonArray{u"1.5"_s, u"-2"_s, u"3.4028234663852886e+38"_s, u"1.401298464324817e-45"_s,
                                  u"0.0"_s, u"nan"_s}; // +0.0 where the file holds -0.0
    changed[9] = f32;
    expected[u"tensors"_s] = changed;
    QVERIFY(gleaner::test::writeFile(expectedPath, QJsonDocument(expected).toJson()));
    const CheckerRun wrongValue = runChecker({path, expectedPath});
    QCOMPARE(wrongValue.exitCode, 1);
    QVERIFY2(wrongValue.output.contains(u"'F32': value 4"_s), qPrintable(wrongValue.output));

    QVERIFY(gleaner::test::writeFile(path, SafeTensors::serialize(bundle).chopped(1)));
    const CheckerRun truncated = runChecker({path, expectedPath});
    QCOMPARE(truncated.exitCode, 1);
}

void TestSafeTensors::readsThePythonWritersFile()
{
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(u"python.safetensors"_s);
    const QString expectedPath = dir->filePath(u"python.json"_s);
    const CheckerRun written = runChecker({u"--write"_s, path, expectedPath});
    QVERIFY2(written.exitCode == 0, qPrintable(written.output));

    const auto loaded = SafeTensors::load(path);
    QVERIFY2(loaded.ok(), qPrintable(loaded.error()));
    const QJsonObject expected = QJsonDocument::fromJson(gleaner::test::readFile(expectedPath)).object();
    const QJsonArray tensors = expected[u"tensors"_s].toArray();
    QVERIFY(tensors.size() >= 13);
    QCOMPARE(loaded->size(), tensors.size());
    for (qsizetype i = 0; i < tensors.size(); ++i) {
        const QJsonObject want = tensors[i].toObject();
        DTypeSample sample{want[u"name"_s].toString(), DType::U8, {}, {}};
        const auto dtype = dtypeFromName(want[u"dtype"_s].toString());
        QVERIFY(dtype);
        sample.dtype = *dtype;
        for (const QJsonValue dim : want[u"shape"_s].toArray())
            sample.shape.append(dim.toInteger());
        for (const QJsonValue value : want[u"values"_s].toArray())
            sample.values.append(value.toString());
        QCOMPARE(loaded->entries().at(i).name, sample.name); // the header's order, escapes decoded
        const QString difference = test::compareSample(*loaded, sample);
        QVERIFY2(difference.isEmpty(), qPrintable(difference));
    }
    QMap<QString, QString> metadata;
    const QJsonObject wantMetadata = expected[u"metadata"_s].toObject();
    for (auto it = wantMetadata.begin(); it != wantMetadata.end(); ++it)
        metadata.insert(it.key(), it.value().toString());
    QCOMPARE(loaded->metadata(), metadata);
}

QTEST_GUILESS_MAIN(TestSafeTensors)
#include "TestSafeTensors.moc"
