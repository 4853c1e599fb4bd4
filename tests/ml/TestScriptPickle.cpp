// The pickles of a TorchScript archive read as libtorch will read them (ml/ScriptPickle): what torch.jit.save writes
// passes with its storages named, and each thing libtorch would trust without looking (a view past its storage, a
// memo id far ahead, a dict read past its end, a global it would resolve to compiled code) is refused by name.
#include "ml/ScriptPickle.h"

#include <QTest>

using namespace gleaner;
using namespace gleaner::ml;

class TestScriptPickle : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void readsWhatTorchWrites();
    void refuses_data();
    void refuses();
};

namespace {

QByteArray long1(qint64 value)
{
    QByteArray out("\x8a\x08", 2);
    for (int i = 0; i < 8; ++i)
        out.append(char(quint64(value) >> (8 * i)));
    return out;
}
QByteArray text(const QByteArray& value)
{
    QByteArray out("X");
    const quint32 n = quint32(value.size());
    for (int i = 0; i < 4; ++i)
        out.append(char(n >> (8 * i)));
    return out + value;
}
QByteArray ints(const QList<qint64>& values)
{
    QByteArray out("(");
    for (qint64 v : values)
        out += long1(v);
    return out + "t";
}

// A tensor as torch.jit.save pickles it: _rebuild_tensor_v2(storage, offset, sizes, strides, False, OrderedDict()).
QByteArray tensor(qint64 elements, qint64 offset, const QList<qint64>& sizes, const QList<qint64>& strides,
                  const QByteArray& storage = "FloatStorage")
{
    return QByteArray("\x80\x02") + "ctorch._utils\n_rebuild_tensor_v2\n(" + "(" + text("storage") + "ctorch\n" +
           storage + "\n" + text("0") + text("cpu") + long1(elements) + "tQ" + long1(offset) + ints(sizes) +
           ints(strides) + "\x89" + "ccollections\nOrderedDict\n)R" + "tR.";
}

} // namespace

void TestScriptPickle::readsWhatTorchWrites()
{
    // A [2, 2] view of a [2, 3] storage from element 1, as x[:, 1:] is saved.
    auto read = ScriptPickle::storages(tensor(6, 1, {2, 2}, {3, 1}), QStringLiteral("m.pt: data.pkl"));
    QVERIFY2(read.ok(), qPrintable(read.error()));
    QCOMPARE(read->size(), 1);
    QCOMPARE(read->at(0).key, QStringLiteral("0"));
    QCOMPARE(read->at(0).elements, 6);
    QCOMPARE(read->at(0).bytes(), 24);
    // Empty tensors and scalars.
    QVERIFY(ScriptPickle::storages(tensor(0, 0, {0, 5}, {5, 1}), QStringLiteral("m")).ok());
    QVERIFY(ScriptPickle::storages(tensor(1, 0, {}, {}), QStringLiteral("m")).ok());
    // An expanded buffer: stride 0.
    QVERIFY(ScriptPickle::storages(tensor(3, 0, {4, 3}, {0, 1}), QStringLiteral("m")).ok());
}

void TestScriptPickle::refuses_data()
{
    QTest::addColumn<QByteArray>("pickle");
    QTest::addColumn<QString>("message");
    QTest::newRow("view past its storage") << tensor(6, 1, {2, 3}, {3, 1}) << QStringLiteral("outside its storage");
    QTest::newRow("offset past its storage") << tensor(6, 7, {1}, {1}) << QStringLiteral("starts at element 7");
    QTest::newRow("negative stride") << tensor(6, 5, {2}, {-1}) << QStringLiteral("negative size or stride");
    QTest::newRow("sizes that overflow") << tensor(6, 0, {qint64(1) << 40, qint64(1) << 40}, {qint64(1) << 40, 1})
                                         << QStringLiteral("overflow");
    QTest::newRow("sizes and strides of other lengths") << tensor(6, 0, {2, 3}, {3}) << QStringLiteral("as many");
    QTest::newRow("quantized storage") << tensor(6, 0, {6}, {1}, "QInt8Storage") << QStringLiteral("element type");
    QTest::newRow("a storage of -1 elements") << tensor(-1, 0, {0}, {1}) << QStringLiteral("claims -1 elements");
    QTest::newRow("TorchBind object") << QByteArray("\x80\x02" "c__torch__.torch.classes.my\nThing\n)\x81}b.")
                                      << QStringLiteral("__torch__.torch.classes.my.Thing, a TorchBind class");
    QTest::newRow("TorchBind type tag")
        << QByteArray("\x80\x02" "ctorch.jit._pickle\nrestore_type_tag\n(}" + text("Dict[str, __torch__.torch.classes.a.B]") + "tR.")
        << QStringLiteral("tagged with a TorchBind class");
    QTest::newRow("sparse tensor") << QByteArray("\x80\x02" "ctorch._utils\n_rebuild_sparse_tensor\n)R.")
                                   << QStringLiteral("sparse");
    QTest::newRow("another global") << QByteArray("\x80\x02" "cos\nsystem\n" + text("id") + "\x85R.")
                                    << QStringLiteral("os.system, which torch.jit.save never writes");
    QTest::newRow("global name with a space") << QByteArray("\x80\x02" "cos\nsys tem\n.")
                                              << QStringLiteral("no Python name has");
    QTest::newRow("memo id far ahead") << QByteArray("\x80\x02Nr\xff\xff\xff\x0f.") << QStringLiteral("skips ahead");
    QTest::newRow("memo id never assigned") << QByteArray("\x80\x02h\x03.") << QStringLiteral("never assigned");
    QTest::newRow("dict with a key and no value") << QByteArray("\x80\x02(K\x01" "d.") << QStringLiteral("key without its value");
    QTest::newRow("set items of a list") << QByteArray("\x80\x02](K\x01K\x02" "u.") << QStringLiteral("no dict");
    QTest::newRow("append to a number") << QByteArray("\x80\x02K\x01(K\x02" "e.") << QStringLiteral("no list");
    QTest::newRow("call of a plain number") << QByteArray("\x80\x02K\x05NR.") << QStringLiteral("no global");
    QTest::newRow("long of nine bytes") << QByteArray("\x80\x02\x8a\x09" "123456789.") << QStringLiteral("9 bytes");
    QTest::newRow("string past the end") << QByteArrayLiteral("\x80\x02X\xff\x00\x00\x00" "ab.") << QStringLiteral("runs past");
    QTest::newRow("no STOP") << QByteArray("\x80\x02N") << QStringLiteral("ends before its STOP");
    QTest::newRow("two values left") << QByteArray("\x80\x02NN.") << QStringLiteral("leaves 2 values");
    QTest::newRow("protocol 4") << QByteArray("\x80\x04N.") << QStringLiteral("protocol 2");
    QTest::newRow("unknown opcode") << QByteArray("\x80\x02\x95.") << QStringLiteral("does not read");
    QTest::newRow("empty") << QByteArray() << QStringLiteral("protocol 2");
    QTest::newRow("millions of marks") << QByteArray("\x80\x02") + QByteArray(4200000, '(') + "N."
                                       << QStringLiteral("holds more than 4194304 values");
}

void TestScriptPickle::refuses()
{
    QFETCH(QByteArray, pickle);
    QFETCH(QString, message);
    auto read = ScriptPickle::storages(pickle, QStringLiteral("m.pt: data.pkl"));
    QVERIFY(!read.ok());
    QVERIFY2(read.error().startsWith(u"m.pt: data.pkl "), qPrintable(read.error()));
    QVERIFY2(read.error().contains(message), qPrintable(read.error()));
}

QTEST_GUILESS_MAIN(TestScriptPickle)
#include "TestScriptPickle.moc"
