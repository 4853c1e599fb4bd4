// NumPy's .npy and .npz, read by Gleaner's own reader: files NumPy itself wrote (tests/ml/data/numpy, see its
// README), and hostile ones made here. Every malformed file is refused by name; pickle is never loaded.
#include "TestSupport.h"

#include "ml/data/DatasetLoader.h"
#include "ml/data/NumPyReader.h"
#include "spec/JobSpec.h"

#include <QFile>
#include <QJsonObject>
#include <QTest>

#include <zlib.h>

using namespace gleaner;
using namespace gleaner::ml;

class TestNumPyReader : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void readsWhatNumPyWrote();
    void readsArchives();
    void refusesWhatItShould_data();
    void refusesWhatItShould();
    void refusesHostileHeaders_data();
    void refusesHostileHeaders();
    void refusesDamagedArchives();
    void loadsDatasets();
};

namespace {

QString fixture(const char* name)
{
    return QStringLiteral(GLEANER_NUMPY_FIXTURES "/") + QLatin1StringView(name);
}

QByteArray readFixture(const char* name)
{
    QFile file(fixture(name));
    return file.open(QIODevice::ReadOnly) ? file.readAll() : QByteArray();
}

// A version 1.0 .npy with this header text, padded as NumPy pads it, and these data bytes.
QByteArray npy(const QByteArray& header, const QByteArray& data)
{
    QByteArray text = header;
    while ((10 + text.size() + 1) % 64 != 0)
        text += ' ';
    text += '\n';
    QByteArray out("\x93NUMPY\x01\x00", 8);
    out += char(text.size() & 0xff);
    out += char(text.size() >> 8);
    return out + text + data;
}

} // namespace

void TestNumPyReader::readsWhatNumPyWrote()
{
    auto f4 = NumPy::loadNpy(fixture("f4.npy"), QStringLiteral("a"));
    QVERIFY2(f4, qPrintable(f4 ? QString() : f4.error()));
    const TensorEntry& a = f4->entries().constFirst();
    QCOMPARE(a.dtype, DType::F32);
    QCOMPARE(a.shape, (QList<qint64>{2, 3}));
    const auto floats = f4->values<float>(a);
    QCOMPARE(floats[5], 5.0f);

    auto v2 = NumPy::loadNpy(fixture("v2.npy"), QStringLiteral("a"));
    QVERIFY2(v2, qPrintable(v2 ? QString() : v2.error()));
    QCOMPARE(v2->entries().constFirst().dtype, DType::I16);
    QCOMPARE(v2->values<qint16>(v2->entries().constFirst())[3], qint16(3));

    auto scalar = NumPy::loadNpy(fixture("scalar.npy"), QStringLiteral("a"));
    QVERIFY2(scalar, qPrintable(scalar ? QString() : scalar.error()));
    QVERIFY(scalar->entries().constFirst().shape.isEmpty());
    QCOMPARE(scalar->values<qint64>(scalar->entries().constFirst())[0], qint64(7));
}

void TestNumPyReader::readsArchives()
{
    auto stored = NumPy::loadNpz(fixture("pair-stored.npz"));
    QVERIFY2(stored, qPrintable(stored ? QString() : stored.error()));
    QCOMPARE(stored->entries().size(), 2);
    const TensorEntry* x = stored->find(u"x");
    QVERIFY(x);
    QCOMPARE(x->dtype, DType::U8);
    QCOMPARE(x->shape, (QList<qint64>{5, 2, 3}));
    QCOMPARE(stored->values<quint8>(*x)[29], quint8(29));

    auto deflated = NumPy::loadNpz(fixture("pair-deflated.npz"));
    QVERIFY2(deflated, qPrintable(deflated ? QString() : deflated.error()));
    const TensorEntry* xf = deflated->find(u"x");
    QVERIFY(xf);
    QCOMPARE(xf->dtype, DType::F64);
    QCOMPARE(deflated->values<double>(*xf)[11], 11.0 / 8.0);
    QCOMPARE(deflated->find(u"y")->dtype, DType::I32);

    // A member that would inflate past the bound is refused before it is inflated.
    auto bounded = NumPy::loadNpz(fixture("pair-deflated.npz"), 50);
    QVERIFY(!bounded);
    QVERIFY2(bounded.error().contains(QStringLiteral("would inflate past")), qPrintable(bounded.error()));
}

void TestNumPyReader::refusesWhatItShould_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("message");
    QTest::newRow("pickle") << fixture("object.npy") << QStringLiteral("only pickle can read; Gleaner never loads pickle");
    QTest::newRow("big-endian") << fixture("bigendian.npy") << QStringLiteral("is big-endian (dtype '>f4')");
    QTest::newRow("fortran") << fixture("fortran.npy") << QStringLiteral("is in Fortran order");
    QTest::newRow("pickle in npz") << fixture("with-object.npz") << QStringLiteral("member y.npy: holds Python objects");
    QTest::newRow("missing") << fixture("absent.npy") << QStringLiteral("cannot be read");
    QTest::newRow("npz as npy") << fixture("keras.npz") << QStringLiteral("is not a NumPy .npy file");
}

void TestNumPyReader::refusesWhatItShould()
{
    QFETCH(QString, file);
    QFETCH(QString, message);
    const auto result = file.endsWith(u".npz") && !message.contains(u".npy file")
                            ? NumPy::loadNpz(file)
                            : NumPy::loadNpy(file, QStringLiteral("a"));
    QVERIFY(!result);
    QVERIFY2(result.error().startsWith(file), qPrintable(result.error()));
    QVERIFY2(result.error().contains(message), qPrintable(result.error()));
}

void TestNumPyReader::refusesHostileHeaders_data()
{
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<QString>("message");
    const QByteArray four(16, '\0');
    QTest::newRow("short data") << npy("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", four)
                                << QStringLiteral("holds 16 bytes of data where its shape [5] of <f4 needs 20");
    QTest::newRow("extra data") << npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", four)
                                << QStringLiteral("needs 12");
    QTest::newRow("overflowing shape")
        << npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }", four)
        << QStringLiteral("too large");
    QTest::newRow("unknown key") << npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}", four)
                                 << QStringLiteral("unknown key 'x'");
    QTest::newRow("missing key") << npy("{'descr': '<f4', 'shape': (4,), }", four)
                                 << QStringLiteral("lacks 'descr', 'fortran_order' or 'shape'");
    QTest::newRow("negative dim") << npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }", four)
                                  << QStringLiteral("not a tuple of non-negative integers");
    QTest::newRow("code in header")
        << npy("{'descr': __import__('os').system('true'), 'fortran_order': False, 'shape': (4,), }", four)
        << QStringLiteral("'descr' that is not a string");
    QTest::newRow("structured dtype")
        << npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }", four)
        << QStringLiteral("'descr' that is not a string");
    QTest::newRow("strings") << npy("{'descr': '<U4', 'fortran_order': False, 'shape': (1,), }", four)
                             << QStringLiteral("dtype '<U4', which Gleaner does not read");
    QTest::newRow("no magic") << QByteArray("NUMPY\x01\x00...........") << QStringLiteral("no \\x93NUMPY magic");
    QTest::newRow("version 9") << QByteArray("\x93NUMPY\x09\x00\x10\x00", 10) + QByteArray(16, ' ')
                               << QStringLiteral("format version 9.0");
    QByteArray huge("\x93NUMPY\x02\x00", 8);
    huge += QByteArray("\xff\xff\xff\x7f", 4);
    QTest::newRow("huge header") << huge << QStringLiteral("more than the 65536 allowed");
    QTest::newRow("cut header") << npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", four).left(30)
                                << QStringLiteral("ends inside its header");
}

void TestNumPyReader::refusesHostileHeaders()
{
    QFETCH(QByteArray, bytes);
    QFETCH(QString, message);
    TensorBundle bundle;
    const Status parsed = NumPy::parseNpyInto(bundle, QStringLiteral("a"), bytes, QStringLiteral("hostile.npy"));
    QVERIFY(!parsed);
    QVERIFY2(parsed.error().startsWith(u"hostile.npy: "), qPrintable(parsed.error()));
    QVERIFY2(parsed.error().contains(message), qPrintable(parsed.error()));
    QVERIFY(bundle.entries().isEmpty());
}

void TestNumPyReader::refusesDamagedArchives()
{
    const QByteArray stored = readFixture("pair-stored.npz");
    QVERIFY(!stored.isEmpty());
    // Every truncation is refused (never read past the end), whatever its length.
    for (qsizetype cut = 0; cut < stored.size(); cut += 7) {
        const auto result = NumPy::parseNpz(QByteArrayView(stored).first(cut), QStringLiteral("cut.npz"));
        QVERIFY2(!result, qPrintable(QStringLiteral("a cut at %1 was accepted").arg(cut)));
    }
    // A flipped data byte of a stored member: the CRC catches it.
    QByteArray flipped = stored;
    const qsizetype data = flipped.indexOf("\x93NUMPY");
    QVERIFY(data > 0);
    flipped[data + 130] = char(flipped[data + 130] ^ 0x55);
    auto damaged = NumPy::parseNpz(flipped, QStringLiteral("flipped.npz"));
    QVERIFY(!damaged);
    QVERIFY2(damaged.error().contains(QStringLiteral("fails its CRC-32 check")), qPrintable(damaged.error()));
    // Every single-byte change of the deflated archive is refused or read within its bounds (no crash, no hang).
    const QByteArray deflated = readFixture("pair-deflated.npz");
    for (qsizetype at = 0; at < deflated.size(); ++at) {
        QByteArray changed = deflated;
        changed[at] = char(changed[at] ^ 0xff);
        (void)NumPy::parseNpz(changed, QStringLiteral("changed.npz"));
    }
    QVERIFY(!NumPy::parseNpz(QByteArray("PK\x05\x06", 4), QStringLiteral("tiny.npz")));
    // A member that claims to inflate to 1 GiB from a few hundred bytes: refused before anything is allocated.
    QByteArray liar = deflated;
    const qsizetype entry = liar.indexOf("PK\x01\x02");
    QVERIFY(entry > 0);
    liar.replace(entry + 24, 4, QByteArray("\x00\x00\x00\x40", 4));
    auto lie = NumPy::parseNpz(liar, QStringLiteral("liar.npz"));
    QVERIFY(!lie);
    QVERIFY2(lie.error().contains(QStringLiteral("more than deflate can")), qPrintable(lie.error()));
}

void TestNumPyReader::loadsDatasets()
{
    auto keras = DatasetSpec::fromJson(QJsonObject{{QStringLiteral("format"), QStringLiteral("npz")},
                                                   {QStringLiteral("file"), fixture("keras.npz")}});
    QVERIFY2(keras, qPrintable(keras ? QString() : keras.error()));
    QCOMPARE(DatasetSpec::fromJson(keras->toJson()).value(), *keras);
    auto split = loadDataset(*keras);
    QVERIFY2(split, qPrintable(split ? QString() : split.error()));
    QCOMPARE(split->train.size(), qint64(5));
    QCOMPARE(split->test.size(), qint64(2));
    QCOMPARE(split->train.sampleShape(), (QList<qint64>{2, 3}));
    QCOMPARE(split->train.label(2), qint64(2));

    // Separate files with x and y; float64 samples become float32, int32 labels int64.
    auto pair = DatasetSpec::fromJson(QJsonObject{{QStringLiteral("format"), QStringLiteral("npz")},
                                                  {QStringLiteral("train"), fixture("pair-deflated.npz")},
                                                  {QStringLiteral("test"), fixture("pair-deflated.npz")}});
    QVERIFY2(pair, qPrintable(pair ? QString() : pair.error()));
    auto loaded = loadDataset(*pair);
    QVERIFY2(loaded, qPrintable(loaded ? QString() : loaded.error()));
    QCOMPARE(loaded->train.sampleType(), DType::F32);
    QCOMPARE(loaded->train.label(0), qint64(3));
    // Sets whose samples differ in shape are refused (the loader's check, for npz as for every format).
    auto mismatched = DatasetSpec::fromJson(QJsonObject{{QStringLiteral("format"), QStringLiteral("npz")},
                                                        {QStringLiteral("train"), fixture("pair-deflated.npz")},
                                                        {QStringLiteral("test"), fixture("pair-stored.npz")}});
    QVERIFY(mismatched);
    QVERIFY(!loadDataset(*mismatched));

    // Keras's names are not x and y: the error says what the file holds and what it needs.
    auto wrongNames = DatasetSpec::fromJson(QJsonObject{{QStringLiteral("format"), QStringLiteral("npz")},
                                                        {QStringLiteral("train"), fixture("keras.npz")},
                                                        {QStringLiteral("test"), fixture("keras.npz")}});
    QVERIFY(wrongNames);
    auto refused = loadDataset(*wrongNames);
    QVERIFY(!refused);
    QVERIFY2(refused.error().contains(QStringLiteral("holds no array \"x\" (it holds x_train, y_train, x_test, y_test)")),
             qPrintable(refused.error()));

    // The spec refuses mixing "file" with "train"/"test", and "file" for another format.
    QVERIFY(!DatasetSpec::fromJson(QJsonObject{{QStringLiteral("format"), QStringLiteral("npz")},
                                               {QStringLiteral("file"), QStringLiteral("a.npz")},
                                               {QStringLiteral("train"), QStringLiteral("b.npz")}}));
    QVERIFY(!DatasetSpec::fromJson(QJsonObject{{QStringLiteral("format"), QStringLiteral("safetensors")},
                                               {QStringLiteral("file"), QStringLiteral("a.npz")}}));
    QVERIFY(!DatasetSpec::fromJson(QJsonObject{{QStringLiteral("format"), QStringLiteral("npz")}}));
}

QTEST_GUILESS_MAIN(TestNumPyReader)
#include "TestNumPyReader.moc"
