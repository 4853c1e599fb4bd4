// Tables for tabular models: CSV with a header, a label column and numeric features, read row by row; every bad
// row is refused naming the file, the line and the column.
#include "TestSupport.h"

#include "ml/data/CsvReader.h"
#include "ml/data/DatasetLoader.h"
#include "spec/JobSpec.h"

#include <QJsonObject>
#include <QTest>

using namespace gleaner;
using namespace gleaner::ml;

class TestCsvReader : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void readsATable();
    void namedClassesFollowTheTrainingFile();
    void refusesBadTables_data();
    void refusesBadTables();
    void loadsThroughTheSpec();
    void holdsOutATestSet();
};

namespace {
QString write(QTemporaryDir& dir, const QString& name, const QByteArray& text)
{
    const QString path = dir.filePath(name);
    test::writeFile(path, text);
    return path;
}
} // namespace

void TestCsvReader::readsATable()
{
    auto dir = test::scratchDir();
    // A byte-order mark, CRLF, quoted fields (one with a comma and a quote), a blank line, the label in the middle.
    const QString path = write(*dir, QStringLiteral("t.csv"),
                               "\xEF\xBB\xBF" "width,class,\"height, cm\"\r\n"
                               "1.5,2,\"3\"\r\n"
                               "\r\n"
                               "-4e-1,0,  7 \r\n");
    auto table = Csv::read(path, QStringLiteral("class"));
    QVERIFY2(table, qPrintable(table ? QString() : table.error()));
    QCOMPARE(table->features, (QStringList{QStringLiteral("width"), QStringLiteral("height, cm")}));
    QVERIFY(table->classes.isEmpty());
    QCOMPARE(table->data.size(), qint64(2));
    QCOMPARE(table->data.sampleShape(), (QList<qint64>{2}));
    QCOMPARE(table->data.sampleType(), DType::F32);
    const auto x = table->data.bundle().values<float>(table->data.x());
    QCOMPARE(x[0], 1.5f);
    QCOMPARE(x[1], 3.0f);
    QCOMPARE(x[2], -0.4f);
    QCOMPARE(x[3], 7.0f);
    QCOMPARE(table->data.label(0), qint64(2));
    QCOMPARE(table->data.label(1), qint64(0));
}

void TestCsvReader::namedClassesFollowTheTrainingFile()
{
    auto dir = test::scratchDir();
    const QString train = write(*dir, QStringLiteral("train.csv"),
                                "a,species\n1,virginica\n2,setosa\n3,versicolor\n4,setosa\n");
    const QString test = write(*dir, QStringLiteral("test.csv"), "a,species\n5,versicolor\n6,setosa\n");
    auto split = Csv::readPair(train, test, QStringLiteral("species"));
    QVERIFY2(split, qPrintable(split ? QString() : split.error()));
    // Sorted names: setosa 0, versicolor 1, virginica 2, in both files.
    QCOMPARE(split->train.label(0), qint64(2));
    QCOMPARE(split->train.label(1), qint64(0));
    QCOMPARE(split->test.label(0), qint64(1));
    QCOMPARE(split->test.label(1), qint64(0));

    const QString unseen = write(*dir, QStringLiteral("unseen.csv"), "a,species\n5,iris-nova\n");
    auto refused = Csv::readPair(train, unseen, QStringLiteral("species"));
    QVERIFY(!refused);
    QVERIFY2(refused.error().contains(QStringLiteral("row 1: label \"iris-nova\" is not one of the training file's classes")),
             qPrintable(refused.error()));
    // A column of identifiers taken for the label: refused once it passes the label limit, naming the column.
    QByteArray ids("a,id\n");
    for (qint64 i = 0; i <= Dataset::kLabelLimit; ++i)
        ids += "1,row-" + QByteArray::number(i) + "\n";
    auto tooMany = Csv::read(write(*dir, QStringLiteral("ids.csv"), ids), QStringLiteral("id"));
    QVERIFY(!tooMany);
    QVERIFY2(tooMany.error().contains(QStringLiteral("the label column \"id\" holds more than 100000 different names")),
             qPrintable(tooMany.error()));
    const QString otherColumns = write(*dir, QStringLiteral("other.csv"), "b,species\n5,setosa\n");
    auto columns = Csv::readPair(train, otherColumns, QStringLiteral("species"));
    QVERIFY(!columns);
    QVERIFY2(columns.error().contains(QStringLiteral("both files need the same")), qPrintable(columns.error()));
}

void TestCsvReader::refusesBadTables_data()
{
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QString>("message");
    QTest::newRow("empty") << QByteArray() << QStringLiteral("is empty");
    QTest::newRow("no label column") << QByteArray("a,b\n1,2\n") << QStringLiteral("has no column \"label\" for the labels; its columns are a, b");
    QTest::newRow("only the label") << QByteArray("label\n1\n") << QStringLiteral("has no feature column");
    QTest::newRow("no rows") << QByteArray("a,label\n") << QStringLiteral("has a header and no rows");
    QTest::newRow("short row") << QByteArray("a,label\n1,2\n3\n") << QStringLiteral("line 3 has 1 fields where the header has 2");
    QTest::newRow("word") << QByteArray("a,label\n1,2\nten,2\n") << QStringLiteral("line 3 column \"a\" holds \"ten\", not a finite number");
    QTest::newRow("empty field") << QByteArray("a,label\n,2\n") << QStringLiteral("column \"a\" holds \"\"");
    QTest::newRow("infinite") << QByteArray("a,label\ninf,2\n") << QStringLiteral("not a finite number");
    QTest::newRow("too large for float") << QByteArray("a,label\n1e39,2\n") << QStringLiteral("not a finite number");
    QTest::newRow("open quote") << QByteArray("a,label\n\"1,2\n") << QStringLiteral("ends inside a quoted field");
    QTest::newRow("stray quote") << QByteArray("a,label\n1\"x\",2\n") << QStringLiteral("stray quote in column 1");
    QTest::newRow("duplicate column") << QByteArray("a,a,label\n1,2,3\n") << QStringLiteral("names a column twice");
    QTest::newRow("label too large") << QByteArray("a,label\n1,100000\n") << QStringLiteral("label");
}

void TestCsvReader::refusesBadTables()
{
    QFETCH(QByteArray, text);
    QFETCH(QString, message);
    auto dir = test::scratchDir();
    const QString path = write(*dir, QStringLiteral("bad.csv"), text);
    auto table = Csv::read(path, QStringLiteral("label"));
    QVERIFY(!table);
    QVERIFY2(table.error().startsWith(path), qPrintable(table.error()));
    QVERIFY2(table.error().contains(message), qPrintable(table.error()));
}

void TestCsvReader::loadsThroughTheSpec()
{
    auto dir = test::scratchDir();
    const QString train = write(*dir, QStringLiteral("train.csv"), "x1,x2,y\n0,1,0\n1,0,1\n");
    const QString test = write(*dir, QStringLiteral("test.csv"), "x1,x2,y\n1,1,1\n");
    auto spec = DatasetSpec::fromJson(QJsonObject{{QStringLiteral("format"), QStringLiteral("csv")},
                                                  {QStringLiteral("train"), train},
                                                  {QStringLiteral("test"), test},
                                                  {QStringLiteral("label"), QStringLiteral("y")}});
    QVERIFY2(spec, qPrintable(spec ? QString() : spec.error()));
    QCOMPARE(DatasetSpec::fromJson(spec->toJson()).value(), *spec);
    auto split = loadDataset(*spec);
    QVERIFY2(split, qPrintable(split ? QString() : split.error()));
    QCOMPARE(split->train.size(), qint64(2));
    QCOMPARE(split->test.size(), qint64(1));
    QVERIFY(!DatasetSpec::fromJson(QJsonObject{{QStringLiteral("format"), QStringLiteral("csv")},
                                               {QStringLiteral("train"), train},
                                               {QStringLiteral("test"), test}}));
    QVERIFY(!DatasetSpec::fromJson(QJsonObject{{QStringLiteral("format"), QStringLiteral("npz")},
                                               {QStringLiteral("file"), train},
                                               {QStringLiteral("label"), QStringLiteral("y")}}));
}

// A table without a test file: test_fraction holds a seeded share of it out, the same every time.
void TestCsvReader::holdsOutATestSet()
{
    auto dir = test::scratchDir();
    QByteArray text("f,y\n");
    for (int i = 0; i < 100; ++i)
        text += QByteArray::number(i) + "," + QByteArray::number(i % 3) + "\n";
    const QString train = write(*dir, QStringLiteral("all.csv"), text);
    const auto specWith = [&](double fraction, qint64 seed) {
        return DatasetSpec::fromJson(QJsonObject{{QStringLiteral("format"), QStringLiteral("csv")},
                                                 {QStringLiteral("train"), train},
                                                 {QStringLiteral("label"), QStringLiteral("y")},
                                                 {QStringLiteral("test_fraction"), fraction},
                                                 {QStringLiteral("split_seed"), double(seed)}});
    };
    auto spec = specWith(0.2, 7);
    QVERIFY2(spec, qPrintable(spec ? QString() : spec.error()));
    QCOMPARE(DatasetSpec::fromJson(spec->toJson()).value(), *spec);
    auto split = loadDataset(*spec);
    QVERIFY2(split, qPrintable(split ? QString() : split.error()));
    QCOMPARE(split->train.size(), qint64(80));
    QCOMPARE(split->test.size(), qint64(20));
    const auto features = [](const Dataset& d) {
        const auto x = d.bundle().values<float>(d.x());
        return std::vector<float>(x.begin(), x.end());
    };
    // Disjoint, together the whole file, each in the file's order.
    std::vector<float> all = features(split->train);
    const std::vector<float> held = features(split->test);
    QVERIFY(std::is_sorted(all.begin(), all.end()) && std::is_sorted(held.begin(), held.end()));
    all.insert(all.end(), held.begin(), held.end());
    std::sort(all.begin(), all.end());
    for (int i = 0; i < 100; ++i)
        QCOMPARE(all[size_t(i)], float(i));
    // The same seed gives the same split; another seed another one.
    QCOMPARE(features(loadDataset(*spec)->test), held);
    QVERIFY(features(loadDataset(*specWith(0.2, 8))->test) != held);
    // And limit_train applies after the split: the test set stays.
    auto limited = loadDataset(*spec, 10);
    QCOMPARE(limited->train.size(), qint64(10));
    QCOMPARE(features(limited->test), held);

    // test and test_fraction together, a fraction out of range, split_seed alone, a format without files.
    QVERIFY(!specWith(0.6, 1));
    QVERIFY(!specWith(0, 1));
    QVERIFY(!DatasetSpec::fromJson(QJsonObject{{QStringLiteral("format"), QStringLiteral("csv")},
                                               {QStringLiteral("train"), train},
                                               {QStringLiteral("test"), train},
                                               {QStringLiteral("label"), QStringLiteral("y")},
                                               {QStringLiteral("test_fraction"), 0.1}}));
    QVERIFY(!DatasetSpec::fromJson(QJsonObject{{QStringLiteral("format"), QStringLiteral("csv")},
                                               {QStringLiteral("train"), train},
                                               {QStringLiteral("test"), train},
                                               {QStringLiteral("label"), QStringLiteral("y")},
                                               {QStringLiteral("split_seed"), 3}}));
    QVERIFY(!DatasetSpec::fromJson(QJsonObject{{QStringLiteral("format"), QStringLiteral("fashion-mnist")},
                                               {QStringLiteral("test_fraction"), 0.1}}));
    // Too few samples to hold any out.
    const QString tiny = write(*dir, QStringLiteral("tiny.csv"), "f,y\n1,0\n");
    auto tinySpec = DatasetSpec::fromJson(QJsonObject{{QStringLiteral("format"), QStringLiteral("csv")},
                                                      {QStringLiteral("train"), tiny},
                                                      {QStringLiteral("label"), QStringLiteral("y")},
                                                      {QStringLiteral("test_fraction"), 0.1}});
    QVERIFY(tinySpec);
    auto refused = loadDataset(*tinySpec);
    QVERIFY(!refused);
    QVERIFY2(refused.error().contains(QStringLiteral("leaves no test or no training set")), qPrintable(refused.error()));
}

QTEST_GUILESS_MAIN(TestCsvReader)
#include "TestCsvReader.moc"
