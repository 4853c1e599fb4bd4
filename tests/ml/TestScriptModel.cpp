// TorchScript models: archives that python3-torch wrote (tests/ml/data/torchscript, see make_fixtures.py) train
// through the same Model, Trainer, checkpoints and Evaluator as the zoo's, come back out as archives PyTorch
// loads, and hostile archives are refused before they run, each with a message that names the cause.
#include "TestSupport.h"

#include "SyntheticData.h"
#include "format/ZipArchive.h"
#include "ml/AllocationBudget.h"
#include "ml/Evaluator.h"
#include "ml/Model.h"
#include "ml/ScriptArchive.h"
#include "ml/Trainer.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonObject>
#include <QTest>

#include <thread>

using namespace gleaner;
using namespace gleaner::ml;

class TestScriptModel : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void specNamesTheArchive();
    void loadsWithPyTorchsNames();
    void trainsThroughTheTrainer_data();
    void trainsThroughTheTrainer();
    void resumeEqualsUninterruptedRun();
    void refusesHostileArchives_data();
    void refusesHostileArchives();
    void allocationBudgetIsScoped();
    void writesTrainedArchives();
};

namespace {

QString fixture(const QString& name)
{
    return QStringLiteral(GLEANER_TORCHSCRIPT_FIXTURES "/") + name;
}

ModelSpec scriptSpec(const QString& file, int classes = 3)
{
    ModelSpec spec;
    spec.arch = Architecture::TorchScript;
    spec.torchscript = fixture(file);
    spec.inputShape = {1, 8, 8};
    spec.numClasses = classes;
    return spec;
}

TrainRequest request(const QString& file)
{
    TrainRequest r;
    r.model = scriptSpec(file);
    r.optimizer.kind = OptimizerSpec::Kind::Adam;
    r.optimizer.lr = 0.01;
    r.localEpochs = 3;
    r.batchSize = 16;
    r.seed = 11;
    r.threads = 1;
    return r;
}

} // namespace

void TestScriptModel::specNamesTheArchive()
{
    auto spec = ModelSpec::fromJson(QJsonObject{{QStringLiteral("torchscript"), QStringLiteral("m.pt")},
                                                {QStringLiteral("input_shape"), QJsonArray{1, 8, 8}},
                                                {QStringLiteral("num_classes"), 3}});
    QVERIFY2(spec.ok(), qPrintable(spec.error()));
    QCOMPARE(spec->arch, Architecture::TorchScript);
    QCOMPARE(spec->archiveFile(), QStringLiteral("m.pt"));
    QVERIFY(spec->archiveSha256().isEmpty());
    QCOMPARE(ModelSpec::fromJson(spec->toJson()).value(), *spec);

    const QString sha(64, u'a');
    auto imported = ModelSpec::fromJson(QJsonObject{{QStringLiteral("arch"), QStringLiteral("torchscript")},
                                                    {QStringLiteral("torchscript"), QString(QStringLiteral("sha256:") + sha)},
                                                    {QStringLiteral("input_shape"), QJsonArray{1, 8, 8}},
                                                    {QStringLiteral("num_classes"), 3}});
    QVERIFY2(imported.ok(), qPrintable(imported.error()));
    QCOMPARE(imported->archiveSha256(), sha);
    QVERIFY(imported->archiveFile().isEmpty()); // held nowhere until the process says where

    const auto refused = [](QJsonObject json, const char* message) {
        auto parsed = ModelSpec::fromJson(json);
        QVERIFY(!parsed);
        QVERIFY2(parsed.error().contains(QLatin1StringView(message)), qPrintable(parsed.error()));
    };
    const QJsonObject base{{QStringLiteral("torchscript"), QStringLiteral("m.pt")},
                           {QStringLiteral("input_shape"), QJsonArray{1, 8, 8}},
                           {QStringLiteral("num_classes"), 3}};
    QJsonObject withHidden = base;
    withHidden.insert(QStringLiteral("hidden"), QJsonArray{4});
    refused(withHidden, "model.hidden: a TorchScript model's sizes are in its archive");
    QJsonObject cnn = base;
    cnn.insert(QStringLiteral("arch"), QStringLiteral("cnn"));
    refused(cnn, "model.torchscript: names a TorchScript archive, which arch \"cnn\" does not take");
    QJsonObject badSha = base;
    badSha.insert(QStringLiteral("torchscript"), QStringLiteral("sha256:xyz"));
    refused(badSha, "64 lowercase hex digits");
    QJsonObject empty = base;
    empty.insert(QStringLiteral("torchscript"), QStringLiteral(" "));
    refused(empty, "model.torchscript: expected the path of an archive written by torch.jit.save");
    QJsonObject none = base;
    none.remove(QStringLiteral("torchscript"));
    none.insert(QStringLiteral("arch"), QStringLiteral("torchscript"));
    refused(none, "model.torchscript");
}

void TestScriptModel::loadsWithPyTorchsNames()
{
    auto model = Model::create(scriptSpec(QStringLiteral("residual.pt")), 1);
    QVERIFY2(model.ok(), qPrintable(model.error()));
    // Exactly the state_dict PyTorch lists (residual-names.txt), in its order.
    QFile names(fixture(QStringLiteral("residual-names.txt")));
    QVERIFY(names.open(QIODevice::ReadOnly));
    const TensorBundle weights = model->weights();
    QStringList expected;
    for (const QByteArray& line : names.readAll().split('\n'))
        if (!line.isEmpty())
            expected << QString::fromUtf8(line.split(' ').first());
    QStringList got;
    for (const TensorEntry& entry : weights.entries())
        got << entry.name;
    QCOMPARE(got, expected);
    QCOMPARE(model->parameterCount(), qint64(64 * 16 + 16 + 16 + 16 + 16 * 16 + 16 + 16 * 3 + 3));

    // BatchNorm's running statistics and its integer counter travel with the weights, as in the zoo.
    auto normed = Model::create(scriptSpec(QStringLiteral("batchnorm.pt")), 1);
    QVERIFY2(normed.ok(), qPrintable(normed.error()));
    const TensorBundle normedWeights = normed->weights();
    QVERIFY(normedWeights.find(QStringLiteral("bn.running_mean")));
    QCOMPARE(normedWeights.find(QStringLiteral("bn.num_batches_tracked"))->dtype, DType::I64);

    // Weights of another model are refused whole, as for the zoo.
    auto sequence = Model::create(scriptSpec(QStringLiteral("sequence.pt")), 1);
    QVERIFY2(sequence.ok(), qPrintable(sequence.error()));
    const Status mismatch = sequence->setWeights(weights);
    QVERIFY(!mismatch);
    QVERIFY2(mismatch.error().contains(QStringLiteral("is not part of this torchscript model")), qPrintable(mismatch.error()));
}

void TestScriptModel::trainsThroughTheTrainer_data()
{
    QTest::addColumn<QString>("file");
    QTest::newRow("LayerNorm, GELU, dropout, residual") << QStringLiteral("residual.pt");
    QTest::newRow("GRU over the rows") << QStringLiteral("sequence.pt");
    QTest::newRow("LSTM, 2 layers, both directions, projections") << QStringLiteral("lstm.pt");
    QTest::newRow("conv and BatchNorm") << QStringLiteral("batchnorm.pt");
    QTest::newRow("conv and BatchNorm, written by PyTorch 2.11") << QStringLiteral("batchnorm-pytorch2.pt");
    QTest::newRow("TransformerEncoder over the rows") << QStringLiteral("transformer.pt");
}

void TestScriptModel::trainsThroughTheTrainer()
{
    QFETCH(QString, file);
    const Dataset train = test::syntheticSet(400, 1, 3);
    const Dataset held = test::syntheticSet(200, 2, 3);
    const TrainRequest r = request(file);
    auto model = Model::create(r.model, 1);
    QVERIFY2(model.ok(), qPrintable(model.error()));
    const TensorBundle start = model->weights();
    auto before = Evaluator::evaluate(r.model, start, held);
    QVERIFY2(before.ok(), qPrintable(before.error()));
    auto outcome = Trainer::train(r, start, train);
    QVERIFY2(outcome.ok(), qPrintable(outcome.error()));
    QCOMPARE(outcome->status, TrainOutcome::Status::Finished);
    auto after = Evaluator::evaluate(r.model, outcome->weights, held);
    QVERIFY2(after.ok(), qPrintable(after.error()));
    QVERIFY2(after->accuracy > 0.9, qPrintable(QString::number(after->accuracy)));
    QVERIFY(after->meanLoss < before->meanLoss);

    // Deterministic for its seed, dropout included.
    auto again = Trainer::train(r, start, train);
    QVERIFY2(again.ok(), qPrintable(again.error()));
    QVERIFY(again->weights.buffer() == outcome->weights.buffer());
}

void TestScriptModel::resumeEqualsUninterruptedRun()
{
    // Dropout draws random masks: a resumed run must draw the ones the uninterrupted run drew.
    const auto dir = test::scratchDir();
    const Dataset shard = test::syntheticSet(400, 3, 3);
    TrainRequest r = request(QStringLiteral("residual.pt"));
    r.checkpointPath = dir->filePath(QStringLiteral("checkpoint.safetensors"));
    const TensorBundle start = Model::create(r.model, 1)->weights();
    auto uninterrupted = Trainer::train(r, start, shard);
    QVERIFY2(uninterrupted.ok(), qPrintable(uninterrupted.error()));

    TrainHooks stopper;
    stopper.betweenBatches = [](const TrainProgress& p) {
        return p.step == 30 ? TrainControl::CheckpointAndStop : TrainControl::Continue;
    };
    auto first = Trainer::train(r, start, shard, stopper);
    QVERIFY2(first.ok(), qPrintable(first.error()));
    QCOMPARE(first->status, TrainOutcome::Status::Stopped);
    (void)Model::create(r.model, 999); // other draws in between must not matter
    auto resumed = Trainer::resume(r, shard);
    QVERIFY2(resumed.ok(), qPrintable(resumed.error()));
    QCOMPARE(resumed->meanLoss, uninterrupted->meanLoss);
    QVERIFY2(resumed->weights.buffer() == uninterrupted->weights.buffer(),
             "resumed weights differ from the uninterrupted run");
}

void TestScriptModel::refusesHostileArchives_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("message");
    QTest::newRow("reads a file") << QStringLiteral("reads-file.pt")
                                  << QStringLiteral("aten::from_file in __torch__.ReadsFile.forward");
    QTest::newRow("hidden in a submodule's method")
        << QStringLiteral("hidden-in-submodule.pt") << QStringLiteral("aten::from_file in __torch__.Helper.peek");
    QTest::newRow("prints") << QStringLiteral("prints.pt") << QStringLiteral("prim::Print in __torch__.Prints.forward");
    QTest::newRow("runs code while it loads")
        << QStringLiteral("sets-state.pt") << QStringLiteral("defines __setstate__, code that would run while the archive loads");
    // Altered after torch.jit.save (make_fixtures.py): each would reach libtorch's memory or run code on load.
    QTest::newRow("a tensor record shorter than declared")
        << QStringLiteral("truncated-record.pt")
        << QStringLiteral("tensor record residual/data/0 holds 4080 bytes, but residual/data.pkl declares 1024 elements of 4 bytes");
    QTest::newRow("a tensor outside its storage")
        << QStringLiteral("storage-too-small.pt") << QStringLiteral("outside its storage");
    QTest::newRow("a TorchBind object") << QStringLiteral("torchbind-object.pt")
                                        << QStringLiteral("__torch__.torch.classes.gleaner.ResidualMlp, a TorchBind class");
    QTest::newRow("source hidden by case")
        << QStringLiteral("code-upper-case.pt")
        << QStringLiteral("its source sets-state/CODE/__torch__.py defines __setstate__");
    QTest::newRow("members that differ only by case")
        << QStringLiteral("case-twins.pt") << QStringLiteral("differ only by case");
    QTest::newRow("wrong output shape") << QStringLiteral("wrong-output.pt")
                                        << QStringLiteral("forward() gives shape [2, 7] for a batch of 2 samples");
    QTest::newRow("float64") << QStringLiteral("double.pt") << QStringLiteral("parameter \"fc.weight\" is Double");
    QTest::newRow("a state_dict") << QStringLiteral("state-dict.pt")
                                  << QStringLiteral("tensors saved with torch.save are not a model");
    QTest::newRow("a pickle") << QStringLiteral("pickle.pt") << QStringLiteral("holds a Python pickle");
    QTest::newRow("missing") << QStringLiteral("absent.pt") << QStringLiteral("cannot be read");
    QTest::newRow("truncated") << QStringLiteral("truncated") << QStringLiteral("no ZIP directory at its end");
    QTest::newRow("altered source") << QStringLiteral("altered") << QStringLiteral("member residual/code/__torch__.py");
    QTest::newRow("text") << QStringLiteral("text") << QStringLiteral("is not a TorchScript archive");
    // Memory access through operators that trust sizes, strides or padding (the audit of docs/your-model.md).
    QTest::newRow("_reshape_alias 4 TiB past its storage")
        << QStringLiteral("reshape-alias.pt")
        << QStringLiteral("aten::_reshape_alias in __torch__.ReshapeAlias.forward");
    QTest::newRow("as_strided") << QStringLiteral("as-strided.pt")
                                << QStringLiteral("aten::as_strided in __torch__.AsStrided.forward");
    QTest::newRow("circular padding")
        << QStringLiteral("circular-pad.pt") << QStringLiteral("aten::pad with mode circular (only constant, reflect");
    QTest::newRow("TorchBind class") << QStringLiteral("torchbind.pt")
                                     << QStringLiteral("uses TorchBind classes (torch.classes.*: compiled C++");
    QTest::newRow("TorchBind attribute")
        << QStringLiteral("torchbind.pt")
        << QStringLiteral("attribute self.packed is declared "
                          "Optional[__torch__.torch.classes.quantized.LinearPackedParamsBase]");
    QTest::newRow("TorchBind method call")
        << QStringLiteral("torchbind.pt") << QStringLiteral("prim::CallMethod in __torch__.UsesTorchBind.forward");
    QTest::newRow("GRU with 1-row gate weights")
        << QStringLiteral("gru-short-weights.pt")
        << QStringLiteral("aten::gru: weight 0 has shape [1, 8]; a layer of hidden size 5 needs 15 rows");
    QTest::newRow("an object cast to a larger class")
        << QStringLiteral("unchecked-cast.pt")
        << QStringLiteral("prim::unchecked_cast from __torch__.CastHolder to __torch__.CastTarget (a cast libtorch "
                          "does not check");
    QTest::newRow("a terabyte of zeros") << QStringLiteral("huge-allocation.pt")
                                         << QStringLiteral("its forward() on a batch of two needs more than 4096 MB");
    QTest::newRow("128 GiB by repeat") << QStringLiteral("huge-repeat.pt")
                                       << QStringLiteral("its forward() on a batch of two needs more than 4096 MB");
}

void TestScriptModel::refusesHostileArchives()
{
    QFETCH(QString, file);
    QFETCH(QString, message);
    const auto dir = test::scratchDir();
    ModelSpec spec = scriptSpec(file);
    QFile original(fixture(QStringLiteral("residual.pt")));
    QVERIFY(original.open(QIODevice::ReadOnly));
    QByteArray bytes = original.readAll();
    if (file == u"truncated" || file == u"altered" || file == u"text") {
        if (file == u"truncated")
            bytes.truncate(bytes.size() / 2);
        else if (file == u"altered") { // one byte of the program's deflated source
            auto members = Zip::directory(bytes, file, QStringLiteral("an archive"), 1000);
            QVERIFY(members.ok());
            for (const Zip::Member& member : *members)
                if (member.name == u"residual/code/__torch__.py")
                    bytes[member.dataAt + qint64(member.packed / 2)] ^= 0x10;
        }
        else
            bytes = "just some text, not a model\n";
        spec.torchscript = dir->filePath(file + u".pt");
        QFile out(spec.torchscript);
        QVERIFY(out.open(QIODevice::WriteOnly) && out.write(bytes) == bytes.size());
    }
    auto model = Model::create(spec, 1);
    QVERIFY(!model);
    QVERIFY2(model.error().contains(spec.torchscript), qPrintable(model.error()));
    QVERIFY2(model.error().contains(message), qPrintable(model.error()));
}

void TestScriptModel::allocationBudgetIsScoped()
{
    // 64 x 4096 weights are 1 MiB of float32: more than a 256 KiB budget lets this thread allocate.
    ModelSpec wide;
    wide.arch = Architecture::Mlp;
    wide.inputShape = {1, 8, 8};
    wide.hidden = {4096};
    wide.numClasses = 3;
    {
        AllocationBudget budget(256 << 10);
        auto refused = Model::create(wide, 1);
        QVERIFY(!refused);
        QVERIFY2(refused.error().contains(u"would take this check past its limit of 262144 bytes"),
                 qPrintable(refused.error()));
        QVERIFY(budget.exceeded());
        QCOMPARE(budget.live(), 0); // what the failed build had allocated was given back

        // Another thread meanwhile (the coordinator's other work, a training run) allocates as it always did.
        bool otherThread = false;
        std::thread([&] { otherThread = Model::create(wide, 1).ok(); }).join();
        QVERIFY(otherThread);
    }
    // And so does this one once the budget ends, even after a refused check.
    auto accepted = Model::create(wide, 1);
    QVERIFY2(accepted.ok(), qPrintable(accepted.error()));
    QVERIFY(!Model::create(scriptSpec(QStringLiteral("huge-allocation.pt")), 1));
    const TrainRequest r = request(QStringLiteral("residual.pt"));
    auto trained = Trainer::train(r, Model::create(r.model, 1)->weights(), test::syntheticSet(100, 5, 3));
    QVERIFY2(trained.ok(), qPrintable(trained.error()));
}

void TestScriptModel::writesTrainedArchives()
{
    const auto dir = test::scratchDir();
    const TrainRequest r = request(QStringLiteral("batchnorm.pt"));
    const TensorBundle start = Model::create(r.model, 1)->weights();
    auto trained = Trainer::train(r, start, test::syntheticSet(200, 4, 3));
    QVERIFY2(trained.ok(), qPrintable(trained.error()));

    auto model = Model::create(r.model, 1);
    QVERIFY(model->setWeights(trained->weights));
    const QString out = dir->filePath(QStringLiteral("trained.pt"));
    QVERIFY(model->saveTorchScript(out));
    ModelSpec written = r.model;
    written.torchscript = out;
    auto reloaded = Model::create(written, 1);
    QVERIFY2(reloaded.ok(), qPrintable(reloaded.error()));
    QVERIFY(reloaded->weights().buffer() == trained->weights.buffer());

    ModelSpec zoo;
    zoo.arch = Architecture::Mlp;
    zoo.inputShape = {1, 8, 8};
    zoo.numClasses = 3;
    const Status refused = Model::create(zoo, 1)->saveTorchScript(out);
    QVERIFY(!refused);
    QVERIFY2(refused.error().contains(QStringLiteral("only a TorchScript model")), qPrintable(refused.error()));
}

QTEST_GUILESS_MAIN(TestScriptModel)
#include "TestScriptModel.moc"
