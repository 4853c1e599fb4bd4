#include "ml/data/CsvReader.h"

#include <QFile>
#include <QHash>
#include <QSet>

#include <algorithm>
#include <cmath>
#include <optional>

namespace gleaner::ml::Csv {
namespace {

constexpr qint64 kMaxRecordBytes = 1 << 20;
constexpr int kMaxColumns = 100000;

// Reads one record (a line, or more when a quoted field holds line breaks) and splits it into fields.
class RecordReader
{
public:
    RecordReader(QFile& file, QString path) : m_file(file), m_path(std::move(path)) {}

    // Nothing at the end of the file; an error names the line.
    std::optional<Result<QList<QByteArray>>> next()
    {
        QByteArray record;
        for (;;) {
            if (m_file.atEnd() && record.isEmpty())
                return std::nullopt;
            const QByteArray line = m_file.readLine(kMaxRecordBytes + 2);
            ++m_line;
            if (line.isEmpty() && m_file.atEnd()) {
                if (record.isEmpty())
                    return std::nullopt;
                return Result<QList<QByteArray>>(Error{problem(QStringLiteral("ends inside a quoted field"))});
            }
            record += line;
            if (record.size() > kMaxRecordBytes)
                return Result<QList<QByteArray>>(Error{problem(QStringLiteral("has a row longer than 1 MiB"))});
            if (record.count('"') % 2 == 0)
                break; // quotes balanced: the record is complete
        }
        while (record.endsWith('\n') || record.endsWith('\r'))
            record.chop(1);
        if (m_line == 1 && record.startsWith("\xEF\xBB\xBF"))
            record.remove(0, 3); // a byte-order mark some spreadsheets write
        return split(record);
    }

    qint64 line() const { return m_line; }
    QString problem(const QString& what) const { return QStringLiteral("%1 line %2 %3").arg(m_path).arg(m_line).arg(what); }

private:
    Result<QList<QByteArray>> split(const QByteArray& record)
    {
        QList<QByteArray> fields;
        QByteArray field;
        bool quoted = false, wasQuoted = false;
        for (qsizetype i = 0; i < record.size(); ++i) {
            const char c = record[i];
            if (quoted) {
                if (c == '"' && i + 1 < record.size() && record[i + 1] == '"') {
                    field += '"';
                    ++i;
                } else if (c == '"') {
                    quoted = false;
                } else {
                    field += c;
                }
            } else if (c == '"' && field.isEmpty() && !wasQuoted) {
                quoted = wasQuoted = true;
            } else if (c == ',') {
                fields << field;
                field.clear();
                wasQuoted = false;
                if (fields.size() > kMaxColumns)
                    return fail(problem(QStringLiteral("has more than %1 columns").arg(kMaxColumns)));
            } else if (c == '"' || wasQuoted) {
                return fail(problem(QStringLiteral("has a stray quote in column %1").arg(fields.size() + 1)));
            } else {
                field += c;
            }
        }
        fields << field;
        return fields;
    }

    QFile& m_file;
    QString m_path;
    qint64 m_line = 0;
};

bool isNonNegativeInteger(const QByteArray& text)
{
    const QByteArray t = text.trimmed();
    return !t.isEmpty() && t.size() <= 6 && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
}

} // namespace

Result<Columns> scan(const QString& path, const QString& labelColumn, const QStringList* classes, const RowSink& onRow)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("%1: cannot be read: %2").arg(path, file.errorString()));
    RecordReader reader(file, path);
    auto header = reader.next();
    if (!header)
        return fail(QStringLiteral("%1 is empty; a table starts with a header row naming its columns").arg(path));
    if (!*header)
        return fail(header->error());
    QStringList names;
    for (const QByteArray& name : header->value())
        names << QString::fromUtf8(name.trimmed());
    const qsizetype labelAt = names.indexOf(labelColumn);
    if (labelAt < 0)
        return fail(QStringLiteral("%1 has no column \"%2\" for the labels; its columns are %3")
                        .arg(path, labelColumn, names.join(QStringLiteral(", "))));
    if (QSet<QString>(names.begin(), names.end()).size() != names.size())
        return fail(QStringLiteral("%1 names a column twice in its header").arg(path));
    Columns columns;
    for (qsizetype i = 0; i < names.size(); ++i)
        if (i != labelAt)
            columns.features << names[i];
    if (columns.features.isEmpty())
        return fail(QStringLiteral("%1 has no feature column besides \"%2\"").arg(path, labelColumn));

    // Each row's label as the number of its text among the distinct texts: memory follows the rows by one
    // number each, not by a copy of the text.
    std::vector<float> values;
    QHash<QByteArray, qint64> idOf;
    QList<QByteArray> texts;
    std::vector<qint64> ids;
    bool allIntegers = true;
    for (;;) {
        auto record = reader.next();
        if (!record)
            break;
        if (!*record)
            return fail(record->error());
        const QList<QByteArray>& fields = record->value();
        if (fields.size() == 1 && fields[0].trimmed().isEmpty())
            continue; // a blank line
        if (fields.size() != names.size())
            return fail(reader.problem(QStringLiteral("has %1 fields where the header has %2").arg(fields.size()).arg(names.size())));
        values.clear();
        for (qsizetype i = 0; i < fields.size(); ++i) {
            if (i == labelAt) {
                const QByteArray text = fields[i].trimmed();
                auto known = idOf.constFind(text);
                if (known == idOf.constEnd()) {
                    known = idOf.insert(text, texts.size());
                    texts << text;
                    allIntegers = allIntegers && isNonNegativeInteger(text);
                    // Names beyond the limit refuse the file whichever way it is read; integer labels have at
                    // most six digits, so their texts stay bounded.
                    if (!classes && !allIntegers && texts.size() > Dataset::kLabelLimit)
                        return fail(QStringLiteral("%1: the label column \"%2\" holds more than %3 different names; is it "
                                                   "the right column?")
                                        .arg(path, labelColumn)
                                        .arg(Dataset::kLabelLimit));
                }
                ids.push_back(*known);
                continue;
            }
            bool ok = false;
            const double value = fields[i].trimmed().toDouble(&ok);
            if (!ok || !std::isfinite(value) || std::abs(value) > 3.0e38)
                return fail(reader.problem(QStringLiteral("column \"%1\" holds \"%2\", not a finite number")
                                               .arg(names[i], QString::fromUtf8(fields[i].left(40)))));
            values.push_back(float(value));
        }
        if (onRow)
            if (Status taken = onRow(qint64(ids.size()) - 1, values); !taken)
                return fail(taken.error());
    }
    if (ids.empty())
        return fail(QStringLiteral("%1 has a header and no rows").arg(path));

    // Integer labels, or names numbered in sorted order.
    const bool integers = classes ? classes->isEmpty() : allIntegers;
    std::vector<qint64> numberOfText(size_t(texts.size()), -1);
    if (integers) {
        for (qsizetype t = 0; t < texts.size(); ++t)
            if (isNonNegativeInteger(texts[t]))
                numberOfText[size_t(t)] = texts[t].toLongLong();
    } else {
        if (classes) {
            columns.classes = *classes;
        } else {
            QSet<QString> distinct;
            for (const QByteArray& text : std::as_const(texts))
                distinct.insert(QString::fromUtf8(text));
            if (distinct.size() > Dataset::kLabelLimit)
                return fail(QStringLiteral("%1: the label column \"%2\" holds more than %3 different names; is it "
                                           "the right column?")
                                .arg(path, labelColumn)
                                .arg(Dataset::kLabelLimit));
            columns.classes = QStringList(distinct.begin(), distinct.end());
            columns.classes.sort();
        }
        QHash<QString, qint64> numberOf; // one lookup a text, not a scan of the classes
        for (qsizetype i = 0; i < columns.classes.size(); ++i)
            numberOf.insert(columns.classes[i], i);
        for (qsizetype t = 0; t < texts.size(); ++t)
            numberOfText[size_t(t)] = numberOf.value(QString::fromUtf8(texts[t]), -1);
    }
    columns.labels.reserve(ids.size());
    for (size_t row = 0; row < ids.size(); ++row) {
        const qint64 number = numberOfText[size_t(ids[row])];
        if (number >= 0) {
            columns.labels.push_back(number);
            continue;
        }
        const QString text = QString::fromUtf8(texts[ids[row]].left(40));
        if (integers)
            return fail(QStringLiteral("%1 row %2: label \"%3\" is not a class number like the training file's")
                            .arg(path)
                            .arg(row + 1)
                            .arg(text));
        return fail(QStringLiteral("%1 row %2: label \"%3\" is not one of the training file's classes (%4)")
                        .arg(path)
                        .arg(row + 1)
                        .arg(text, columns.classes.join(QStringLiteral(", "))));
    }
    return columns;
}

Result<Table> read(const QString& path, const QString& labelColumn, const QStringList* classes)
{
    std::vector<float> values;
    auto columns = scan(path, labelColumn, classes, [&values](qint64, std::span<const float> row) -> Status {
        values.insert(values.end(), row.begin(), row.end());
        return {};
    });
    if (!columns)
        return fail(columns.error());
    Table table;
    table.features = columns->features;
    table.classes = columns->classes;
    TensorBundle bundle;
    const qint64 rows = qint64(columns->labels.size());
    const QList<qint64> shape{rows, qint64(table.features.size())};
    if (auto added = bundle.add(QStringLiteral("x"), DType::F32, shape,
                                QByteArrayView(reinterpret_cast<const char*>(values.data()), qsizetype(values.size() * sizeof(float))));
        !added)
        return fail(QStringLiteral("%1: %2").arg(path, added.error()));
    if (auto added = bundle.addValues<qint64>(QStringLiteral("y"), DType::I64, {rows}, columns->labels); !added)
        return fail(QStringLiteral("%1: %2").arg(path, added.error()));
    auto data = Dataset::fromBundle(std::move(bundle), path);
    if (!data)
        return fail(data.error());
    table.data = std::move(*data);
    return table;
}

namespace {

// A training table read twice: for its labels when opened, for its rows in readSamples().
class TableSource final : public SampleSource
{
public:
    TableSource(QString path, QString labelColumn, Columns columns)
        : m_path(std::move(path)), m_labelColumn(std::move(labelColumn))
    {
        m_sampleShape = {qint64(columns.features.size())};
        m_sampleType = DType::F32;
        m_labels = std::move(columns.labels);
    }

    Status readSamples(const Sink& sink) override
    {
        auto again = scan(m_path, m_labelColumn, nullptr, [&](qint64 row, std::span<const float> features) {
            return sink(row, QByteArrayView(reinterpret_cast<const char*>(features.data()), qsizetype(features.size_bytes())));
        });
        if (!again)
            return fail(again.error());
        if (again->labels != m_labels)
            return fail(QStringLiteral("%1 changed while it was imported; import it again").arg(m_path));
        return {};
    }

private:
    QString m_path;
    QString m_labelColumn;
};

} // namespace

Result<std::unique_ptr<SampleSource>> openSource(const QString& path, const QString& labelColumn, Columns& columns)
{
    auto scanned = scan(path, labelColumn, nullptr, {});
    if (!scanned)
        return fail(scanned.error());
    // Dataset::fromBundle's check of the labels, which the in-memory read makes.
    if (auto checked = Dataset::labelsFrom(DType::I64, QByteArrayView(reinterpret_cast<const char*>(scanned->labels.data()),
                                                                    qsizetype(scanned->labels.size() * sizeof(qint64))),
                                           path);
        !checked)
        return fail(checked.error());
    columns.features = scanned->features;
    columns.classes = scanned->classes;
    return std::unique_ptr<SampleSource>(std::make_unique<TableSource>(path, labelColumn, std::move(*scanned)));
}

Result<DatasetSplit> readPair(const QString& trainPath, const QString& testPath, const QString& labelColumn)
{
    auto train = read(trainPath, labelColumn);
    if (!train)
        return fail(train.error());
    if (testPath.isEmpty())
        return DatasetSplit{std::move(train->data), {}};
    auto test = read(testPath, labelColumn, &train->classes);
    if (!test)
        return fail(test.error());
    if (test->features != train->features)
        return fail(QStringLiteral("%1 has the feature columns %2, %3 has %4; both files need the same")
                        .arg(testPath, test->features.join(QStringLiteral(", ")), trainPath,
                             train->features.join(QStringLiteral(", "))));
    return DatasetSplit{std::move(train->data), std::move(test->data)};
}

} // namespace gleaner::ml::Csv
