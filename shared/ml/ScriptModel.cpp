#include <torch/torch.h>
#include <torch/script.h>

#include "ml/AllocationBudget.h"
#include "ml/RnnWeightCheck.h"
#include "ml/ScriptArchive.h"
#include "ml/TorchInternals.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <optional>
#include <unordered_set>
#include <vector>

namespace gleaner::ml {
namespace {

// The memory forward() may hold on the check's batch of two, parameters loaded before it not counted.
constexpr qint64 kCheckMemory = qint64(4) << 30;

const std::unordered_set<std::string>& allowedOperators()
{
    static const std::unordered_set<std::string> names{
#include "ml/ScriptOperators.inc"
    };
    return names;
}

// Every node of a graph, nested blocks (if, loop) and subgraphs included.
template <typename Visit> void visitNodes(torch::jit::Block* block, const Visit& visit)
{
    for (torch::jit::Node* node : block->nodes()) {
        visit(node);
        for (torch::jit::Block* inner : node->blocks())
            visitNodes(inner, visit);
        if (node->hasAttribute(c10::attr::Subgraph))
            visitNodes(node->g(c10::attr::Subgraph)->block(), visit);
    }
}

QString whereIn(const torch::jit::Node* node)
{
    const auto place = node->sourceRange().file_line_col();
    if (!place)
        return {};
    const auto& [file, line, column] = *place;
    return QStringLiteral(" (%1:%2)").arg(QString::fromStdString(file)).arg(line);
}

// aten::pad stays allowed for the modes whose kernels check their padding; its circular mode reads before the
// input on negative padding (docs/your-model.md), so the mode must be a constant other than "circular".
std::optional<QString> refusedPad(const torch::jit::Node* node)
{
    if (node->kind() != c10::Symbol::fromQualString("aten::pad") || node->inputs().size() < 3)
        return std::nullopt;
    const std::optional<c10::IValue> mode = torch::jit::toIValue(node->input(2));
    if (mode && mode->isString() && mode->toStringRef() != "circular")
        return std::nullopt;
    if (mode && mode->isNone()) // the default, "constant"
        return std::nullopt;
    return QStringLiteral("aten::pad with mode %1 (only constant, reflect and replicate padding is allowed)")
        .arg(mode && mode->isString() ? QString::fromStdString(mode->toStringRef())
                                      : QStringLiteral("computed at run time"));
}

// A value libtorch reads by checking its tag at every use: a wrong one gives an error, never a wrong read.
bool tagChecked(const c10::TypePtr& type, int depth = 0)
{
    if (depth > 32)
        return false;
    switch (type->kind()) {
    case c10::TypeKind::TensorType:
    case c10::TypeKind::IntType:
    case c10::TypeKind::FloatType:
    case c10::TypeKind::ComplexType:
    case c10::TypeKind::BoolType:
    case c10::TypeKind::NumberType:
    case c10::TypeKind::StringType:
    case c10::TypeKind::NoneType:
    case c10::TypeKind::DeviceObjType:
        return true;
    case c10::TypeKind::OptionalType:
    case c10::TypeKind::ListType:
    case c10::TypeKind::DictType:
        for (const c10::TypePtr& inner : type->containedTypes())
            if (!tagChecked(inner, depth + 1))
                return false;
        return true;
    default: // objects (attributes read by index), tuples (unpacked by count), Any, unions, ...
        return false;
    }
}

// prim::unchecked_cast changes a value's static type without looking at the value: the compiler emits it after
// a test (x is not None, isinstance), but a program's source can write it anywhere, and an object cast to a
// class with more attributes has its attributes read and written past its own (libtorch reads them by index).
// Allowed: Optional[T] to T (the value is a T or None, and None fails every use), and casts to types whose every
// use checks the value's tag.
std::optional<QString> refusedCast(const torch::jit::Node* node)
{
    static const c10::Symbol cast = c10::Symbol::fromQualString("prim::unchecked_cast");
    if (node->kind() != cast || node->inputs().size() != 1 || node->outputs().size() != 1)
        return std::nullopt;
    const c10::TypePtr from = node->input()->type();
    const c10::TypePtr to = node->output()->type();
    if (const auto optional = from->cast<c10::OptionalType>(); optional && *optional->getElementType() == *to)
        return std::nullopt;
    if (tagChecked(to))
        return std::nullopt;
    return QStringLiteral("prim::unchecked_cast from %1 to %2 (a cast libtorch does not check: only Optional[T] "
                          "to T and casts to tensors, numbers, strings and lists or dicts of them are allowed)")
        .arg(QString::fromStdString(from->annotation_str()), QString::fromStdString(to->annotation_str()));
}

// TorchBind classes (torch.classes.*) are C++ code compiled into libtorch, reached through an object's methods
// (prim::CallMethod, prim::GetAttr), not operators: the allowlist never sees them. Any value, attribute or
// argument whose type is one, at any depth (Optional, List, Tuple, Dict), is refused.
bool isTorchBind(const c10::TypePtr& type, int depth = 0)
{
    if (!type || depth > 32)
        return false;
    if (const auto cls = type->cast<c10::ClassType>()) {
        // A class's own attributes are not part of its type here: the object walk and each GetAttr see them.
        if (cls->is_module() || !cls->name())
            return false;
        const std::string name = cls->name()->qualifiedName();
        if (name.rfind("__torch__.torch.classes.", 0) == 0)
            return true;
        try {
            return torch::getCustomClass(name) != nullptr;
        } catch (const c10::Error&) { // not a custom class: TorchScript's own
            return false;
        }
    }
    for (const c10::TypePtr& inner : type->containedTypes())
        if (isTorchBind(inner, depth + 1))
            return true;
    return false;
}

QString typeName(const c10::TypePtr& type)
{
    return QString::fromStdString(type->annotation_str());
}

// The loaded objects themselves, the module and every object its attributes hold: a TorchBind object among them
// is refused even when no code touches it.
void findTorchBindAttributes(const c10::IValue& value, const QString& path, QStringList& refused, int depth = 0)
{
    if (depth > 64 || refused.size() >= 20)
        return;
    if (value.isObject()) {
        const auto object = value.toObject();
        const c10::ClassTypePtr type = object->type();
        if (isTorchBind(type)) {
            refused << QStringLiteral("attribute %1 holds a %2").arg(path, typeName(type));
            return;
        }
        for (size_t i = 0; i < type->numAttributes() && i < object->slots().size(); ++i) {
            const QString name = path + u'.' + QString::fromStdString(type->getAttributeName(i));
            if (isTorchBind(type->getAttribute(i)))
                refused << QStringLiteral("attribute %1 is declared %2").arg(name, typeName(type->getAttribute(i)));
            else
                findTorchBindAttributes(object->getSlot(i), name, refused, depth + 1);
        }
    } else if (value.isList()) {
        for (const c10::IValue& item : value.toListRef())
            findTorchBindAttributes(item, path + u"[]", refused, depth + 1);
    } else if (value.isTuple()) {
        for (const c10::IValue& item : value.toTupleRef().elements())
            findTorchBindAttributes(item, path + u"[]", refused, depth + 1);
    } else if (value.isGenericDict()) {
        for (const auto& entry : value.toGenericDict())
            findTorchBindAttributes(entry.value(), path + u"[]", refused, depth + 1);
    }
}

// Walks every function the archive compiled, every method of every module and class in it: an operator hidden in
// a method that forward() reaches only through a submodule is seen as well as one in forward() itself. Each node's
// inputs and outputs are checked for TorchBind types as well, and so are the graph's own arguments.
Status checkOperators(const torch::jit::Module& module, const QString& path)
{
    QStringList refused;
    QStringList torchBind;
    findTorchBindAttributes(module._ivalue(), QStringLiteral("self"), torchBind);
    const auto unit = module._ivalue()->compilation_unit();
    for (torch::jit::Function* function : unit->get_functions()) {
        if (!function->isGraphFunction())
            continue;
        const QString name = QString::fromStdString(function->qualname().qualifiedName());
        const std::shared_ptr<torch::jit::Graph> graph = torch::jit::toGraphFunction(*function).graph();
        for (const torch::jit::Value* input : graph->inputs())
            if (isTorchBind(input->type()) && torchBind.size() < 20)
                torchBind << QStringLiteral("%1 takes a %2").arg(name, typeName(input->type()));
        visitNodes(graph->block(), [&](const torch::jit::Node* node) {
            const std::string kind = node->kind().toQualString();
            if (allowedOperators().count(kind) == 0 && refused.size() < 20)
                refused << QStringLiteral("%1 in %2%3").arg(QString::fromStdString(kind), name, whereIn(node));
            else if (const auto pad = refusedPad(node); pad && refused.size() < 20)
                refused << QStringLiteral("%1 in %2%3").arg(*pad, name, whereIn(node));
            else if (const auto cast = refusedCast(node); cast && refused.size() < 20)
                refused << QStringLiteral("%1 in %2%3").arg(*cast, name, whereIn(node));
            std::vector<const torch::jit::Value*> values(node->inputs().begin(), node->inputs().end());
            values.insert(values.end(), node->outputs().begin(), node->outputs().end());
            for (const torch::jit::Value* value : values)
                if (isTorchBind(value->type()) && torchBind.size() < 20) {
                    torchBind << QStringLiteral("%1 in %2%3 uses a %4")
                                     .arg(QString::fromStdString(kind), name, whereIn(node), typeName(value->type()));
                    break;
                }
        });
    }
    if (!torchBind.isEmpty()) {
        torchBind.removeDuplicates();
        return fail(QStringLiteral("%1 uses TorchBind classes (torch.classes.*: compiled C++ that Gleaner does not "
                                   "run; only TorchScript's own modules and classes are allowed): %2")
                        .arg(path, torchBind.join(QStringLiteral("; "))));
    }
    if (refused.isEmpty())
        return {};
    refused.removeDuplicates();
    return fail(QStringLiteral("%1 calls operators that Gleaner does not run (only pure tensor computation is "
                               "allowed): %2")
                    .arg(path, refused.join(QStringLiteral("; "))));
}

NamedTensors named(const torch::jit::named_parameter_list& list)
{
    NamedTensors out;
    for (const auto& item : list)
        out.emplace_back(item.name, item.value);
    return out;
}
NamedTensors named(const torch::jit::named_buffer_list& list)
{
    NamedTensors out;
    for (const auto& item : list)
        out.emplace_back(item.name, item.value);
    return out;
}

// A TorchScript program. Its graphs run in the interpreter without the executor's optimising passes, op by op as
// the zoo's modules do: the same numerics in every run, which a checkpoint's exact resume relies on.
class ScriptNetwork final : public Network
{
public:
    explicit ScriptNetwork(torch::jit::Module module) : m_module(std::move(module)) {}

    torch::Tensor forward(const torch::Tensor& input) override
    {
        const torch::jit::GraphOptimizerEnabledGuard plain(false);
        const c10::IValue output = m_module.forward({input});
        if (!output.isTensor())
            throw std::runtime_error("the model's forward() returned " + output.tagKind() +
                                     ", not a tensor of logits");
        return output.toTensor();
    }
    void train(bool on) override { m_module.train(on); }
    bool isTraining() const override { return m_module.is_training(); }
    NamedTensors parameters() const override { return named(m_module.named_parameters(/*recurse=*/true)); }
    NamedTensors buffers() const override { return named(m_module.named_buffers(/*recurse=*/true)); }
    void to(const torch::Device& device) override { m_module.to(device); }
    bool drawsRandomness() const override { return true; }
    Status save(const QString& path) const override
    {
        m_module.save(path.toStdString());
        return {};
    }

private:
    mutable torch::jit::Module m_module;
};

} // namespace

Result<Model::Impl> loadScript(const ModelSpec& spec)
{
    const QString path = spec.archiveFile();
    if (path.isEmpty())
        return fail(QStringLiteral("model.torchscript names archive %1, which this process does not hold")
                        .arg(spec.torchscript));
    if (auto inspected = ScriptArchive::inspect(path); !inspected)
        return fail(inspected.error());
    installRnnWeightCheck();
    torch::jit::Module module = [&] {
        try {
            return torch::jit::load(path.toStdString(), torch::Device(torch::kCPU));
        } catch (const c10::Error& e) {
            throw std::runtime_error(path.toStdString() + " is not a TorchScript archive libtorch can load (" +
                                     e.what_without_backtrace() + ")");
        }
    }();
    if (auto checked = checkOperators(module, path); !checked)
        return fail(checked.error());

    for (const auto& item : module.named_parameters(true))
        if (item.value.scalar_type() != torch::kFloat32)
            return fail(QStringLiteral("%1: parameter \"%2\" is %3; Gleaner trains float32 models (call "
                                       "model.float() before torch.jit.script)")
                            .arg(path, QString::fromStdString(item.name),
                                 QString::fromLatin1(c10::toString(item.value.scalar_type()))));
    for (const auto& item : module.named_buffers(true))
        if (item.value.is_floating_point() && item.value.scalar_type() != torch::kFloat32)
            return fail(QStringLiteral("%1: buffer \"%2\" is %3; Gleaner trains float32 models (call model.float() "
                                       "before torch.jit.script)")
                            .arg(path, QString::fromStdString(item.name),
                                 QString::fromLatin1(c10::toString(item.value.scalar_type()))));

    Model::Impl impl;
    impl.spec = spec;
    impl.net = std::make_unique<ScriptNetwork>(std::move(module));

    // The output's shape, checked on a zero batch of two in eval mode: the model must give one row of logits per
    // sample, num_classes wide.
    std::vector<int64_t> shape{2};
    for (qint64 d : spec.inputShape)
        shape.push_back(d);
    const bool training = impl.net->isTraining();
    impl.net->train(false);
    torch::Tensor logits;
    {
        torch::NoGradGuard noGrad;
        const torch::Tensor zeros = torch::zeros(shape);
        // The coordinator runs this on every submitted program: its tensors are bounded, so a program that asks for
        // terabytes is refused here instead of taking the coordinator's memory (or a worker's).
        AllocationBudget budget(kCheckMemory);
        try {
            logits = impl.net->forward(zeros);
        } catch (const std::exception& e) {
            if (budget.exceeded())
                return fail(QStringLiteral("%1: its forward() on a batch of two needs more than %2 MB of memory, "
                                           "the most Gleaner lets a check take; a model that fits a training batch "
                                           "on a volunteer's machine needs far less on two samples")
                                .arg(path)
                                .arg(kCheckMemory >> 20));
            QString why = QString::fromUtf8(e.what());
            if (const auto* error = dynamic_cast<const c10::Error*>(&e))
                why = QString::fromUtf8(error->what_without_backtrace());
            return fail(QStringLiteral("%1: its forward() fails on a batch of input_shape %2: %3")
                            .arg(path, shapeToString(spec.inputShape), why.trimmed()));
        }
    }
    impl.net->train(training);
    const std::vector<int64_t> want{2, spec.numClasses};
    if (logits.sizes().vec() != want) {
        QList<qint64> got;
        for (auto d : logits.sizes())
            got.append(d);
        return fail(QStringLiteral("%1: forward() gives shape %2 for a batch of 2 samples of input_shape %3; it "
                                   "must give [2, %4] (num_classes)")
                        .arg(path, shapeToString(got), shapeToString(spec.inputShape))
                        .arg(spec.numClasses));
    }
    if (!logits.is_floating_point())
        return fail(QStringLiteral("%1: forward() gives %2 values; logits must be floating-point")
                        .arg(path, QString::fromLatin1(c10::toString(logits.scalar_type()))));
    return impl;
}

} // namespace gleaner::ml
