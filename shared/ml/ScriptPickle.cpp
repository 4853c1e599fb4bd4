#include "ml/ScriptPickle.h"

#include <cstring>
#include <memory>
#include <vector>

namespace gleaner::ml::ScriptPickle {
namespace {

// What the scan knows of a value on libtorch's stack: enough to check the arguments of what it calls.
struct Value
{
    enum class Kind { None, Bool, Int, Float, Text, Tuple, List, Dict, Tensor, Object };
    Kind kind = Kind::None;
    qint64 number = 0;       // Int; Tensor: the elements of its storage
    QByteArray text;         // Text
    std::shared_ptr<const std::vector<Value>> items; // Tuple (shared: the memo copies values freely)
};

// The callables a GLOBAL registers, as libtorch's unpickler names them.
enum class Global { RebuildTensor, OrderedDict, Device, RestoreTypeTag, TypedList, Complex, ScriptClass };

// c10::ScalarType's values and item sizes for the storages Gleaner reads; quantized types are refused.
struct ElementType
{
    const char* storage;
    int scalarType;
    int itemBytes;
};
constexpr ElementType kElementTypes[] = {
    {"ByteStorage", 0, 1},    {"CharStorage", 1, 1},          {"ShortStorage", 2, 2},
    {"IntStorage", 3, 4},     {"LongStorage", 4, 8},          {"HalfStorage", 5, 2},
    {"FloatStorage", 6, 4},   {"DoubleStorage", 7, 8},        {"ComplexFloatStorage", 9, 8},
    {"ComplexDoubleStorage", 10, 16}, {"BoolStorage", 11, 1}, {"BFloat16Storage", 15, 2},
};

int itemBytesOf(qint64 scalarType)
{
    for (const ElementType& type : kElementTypes)
        if (type.scalarType == scalarType)
            return type.itemBytes;
    return 0;
}

// The most dimensions a tensor may have (libtorch's own limit is 64).
constexpr int kMaxDims = 64;
// The most values, memo entries and marks held at once: each opcode byte may add one, so a pickle of kMaxBytes
// could otherwise hold gigabytes of them (libtorch's unpickler as much). A large model's pickle holds thousands.
constexpr size_t kMaxHeld = size_t(1) << 22;

class Scan
{
public:
    Scan(QByteArrayView pickle, const QString& what) : m_in(pickle), m_what(what) {}

    Result<QList<Storage>> run()
    {
        if (m_in.size() > kMaxBytes)
            return refuse(QStringLiteral("is %1 bytes; a TorchScript pickle may hold at most %2")
                              .arg(m_in.size())
                              .arg(kMaxBytes));
        quint8 op = 0, protocol = 0;
        if (!byte(op) || op != 0x80 || !byte(protocol) || protocol != 2)
            return refuse(QStringLiteral("is not a pickle of protocol 2, which torch.jit.save writes"));
        while (true) {
            const qsizetype at = m_at;
            if (!byte(op))
                return refuse(QStringLiteral("ends before its STOP (truncated?)"));
            if (op == '.')
                break;
            if (!step(op))
                return refuse(QStringLiteral("at byte %1 (opcode 0x%2): %3")
                                  .arg(at)
                                  .arg(op, 2, 16, QLatin1Char('0'))
                                  .arg(m_problem));
            if (m_stack.size() + m_memo.size() + m_marks.size() > kMaxHeld)
                return refuse(QStringLiteral("holds more than %1 values at byte %2; no model's pickle holds so many")
                                  .arg(kMaxHeld)
                                  .arg(at));
        }
        if (m_stack.size() != 1 || !m_marks.empty())
            return refuse(QStringLiteral("leaves %1 values instead of one (not what torch.jit.save writes)")
                              .arg(m_stack.size()));
        return m_storages;
    }

private:
    Error refuse(const QString& why) const { return fail(QStringLiteral("%1 %2").arg(m_what, why)); }
    bool bad(const QString& why)
    {
        m_problem = why;
        return false;
    }

    bool byte(quint8& out)
    {
        if (m_at >= m_in.size())
            return false;
        out = quint8(m_in[m_at++]);
        return true;
    }
    template <typename T> bool little(T& out)
    {
        if (m_in.size() - m_at < qsizetype(sizeof(T)))
            return bad(QStringLiteral("the pickle ends inside a number"));
        std::memcpy(&out, m_in.data() + m_at, sizeof(T)); // pickles are little-endian, as is every machine we build for
        m_at += qsizetype(sizeof(T));
        return true;
    }
    // A GLOBAL's module or name: a qualified Python identifier ended by a newline.
    bool line(QByteArray& out)
    {
        const qsizetype end = m_in.indexOf('\n', m_at);
        if (end < 0)
            return bad(QStringLiteral("a global's name has no end"));
        out = m_in.sliced(m_at, end - m_at).toByteArray();
        m_at = end + 1;
        for (char c : std::as_const(out))
            if (!(c == '_' || c == '.' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
                return bad(QStringLiteral("a global's name holds a character no Python name has"));
        return true;
    }

    bool need(size_t count)
    {
        return m_stack.size() >= count ? true : bad(QStringLiteral("the stack holds fewer values than it takes"));
    }
    Value pop()
    {
        Value value = std::move(m_stack.back());
        m_stack.pop_back();
        return value;
    }
    bool popMark(size_t& start)
    {
        if (m_marks.empty())
            return bad(QStringLiteral("no MARK precedes it"));
        start = m_marks.back();
        m_marks.pop_back();
        return start <= m_stack.size() ? true : bad(QStringLiteral("its MARK lies beyond the stack"));
    }
    void pushTuple(size_t start)
    {
        auto items = std::make_shared<std::vector<Value>>(std::make_move_iterator(m_stack.begin() + qsizetype(start)),
                                                          std::make_move_iterator(m_stack.end()));
        m_stack.resize(start);
        Value tuple;
        tuple.kind = Value::Kind::Tuple;
        tuple.items = std::move(items);
        m_stack.push_back(std::move(tuple));
    }
    void push(Value::Kind kind, qint64 number = 0)
    {
        Value value;
        value.kind = kind;
        value.number = number;
        m_stack.push_back(std::move(value));
    }

    bool memoPut(quint32 id)
    {
        if (!need(1))
            return false;
        // Python's pickler and libtorch's number their memo entries in order; libtorch would grow its table to any
        // id it is given.
        if (id > m_memo.size())
            return bad(QStringLiteral("memo id %1 skips ahead of the %2 assigned").arg(id).arg(m_memo.size()));
        if (id == m_memo.size())
            m_memo.push_back(m_stack.back());
        else
            m_memo[id] = m_stack.back();
        return true;
    }
    bool memoGet(quint32 id)
    {
        if (id >= m_memo.size())
            return bad(QStringLiteral("memo id %1 was never assigned").arg(id));
        m_stack.push_back(m_memo[id]);
        return true;
    }

    bool global()
    {
        QByteArray module, name;
        if (!line(module) || !line(name))
            return false;
        const QString qualified = QString::fromLatin1(module + '.' + name);
        const auto registered = [this](Global kind) {
            m_globals.push_back(kind);
            push(Value::Kind::Int, qint64(m_globals.size()) - 1);
            return true;
        };
        if (module == "torch._utils" && name == "_rebuild_tensor_v2")
            return registered(Global::RebuildTensor);
        if (module == "collections" && name == "OrderedDict")
            return registered(Global::OrderedDict);
        if (module == "torch" && name == "device")
            return registered(Global::Device);
        if (module == "builtins" && name == "complex")
            return registered(Global::Complex);
        if (module == "torch.jit._pickle") {
            if (name == "restore_type_tag")
                return registered(Global::RestoreTypeTag);
            if (name == "build_intlist" || name == "build_doublelist" || name == "build_boollist" ||
                name == "build_tensorlist")
                return registered(Global::TypedList);
        }
        if (module == "torch" && name.endsWith("Storage")) {
            // An element type: libtorch pushes its number and registers nothing.
            for (const ElementType& type : kElementTypes)
                if (name == type.storage) {
                    push(Value::Kind::Int, type.scalarType);
                    return true;
                }
            return bad(QStringLiteral("it names %1, an element type Gleaner does not load (quantized?)").arg(qualified));
        }
        if (module == "__torch__.torch.classes" || module.startsWith("__torch__.torch.classes."))
            return bad(QStringLiteral("it holds an object of %1, a TorchBind class: compiled code that would run while "
                                      "the archive loads; Gleaner runs only TorchScript's own classes")
                           .arg(qualified));
        // The program's own classes (modules, classes, enums), which libtorch compiles from code/.
        if (module == "__torch__" || module.startsWith("__torch__."))
            return registered(Global::ScriptClass);
        if (module == "torch._utils" && (name == "_rebuild_qtensor" || name == "_rebuild_sparse_tensor"))
            return bad(QStringLiteral("it rebuilds a %1 tensor (%2); Gleaner loads dense tensors only")
                           .arg(name == "_rebuild_qtensor" ? QStringLiteral("quantized") : QStringLiteral("sparse"),
                                qualified));
        return bad(QStringLiteral("it names %1, which torch.jit.save never writes").arg(qualified));
    }

    static bool isIntTuple(const Value& value, std::vector<qint64>& out)
    {
        if (value.kind != Value::Kind::Tuple || value.items->size() > size_t(kMaxDims))
            return false;
        out.clear();
        for (const Value& item : *value.items) {
            if (item.kind != Value::Kind::Int)
                return false;
            out.push_back(item.number);
        }
        return true;
    }

    // _rebuild_tensor_v2(storage, offset, sizes, strides, requires_grad, hooks[, math bits]): the view must lie
    // inside the storage, since libtorch sets it without looking.
    bool rebuildTensor(const Value& args)
    {
        const std::vector<Value>* items = args.kind == Value::Kind::Tuple ? args.items.get() : nullptr;
        if (!items || items->size() < 6 || items->size() > 7 || (*items)[0].kind != Value::Kind::Tensor ||
            (*items)[1].kind != Value::Kind::Int || (*items)[4].kind != Value::Kind::Bool ||
            (items->size() == 7 && (*items)[6].kind != Value::Kind::Dict))
            return bad(QStringLiteral("a tensor is rebuilt from arguments torch.jit.save never writes"));
        std::vector<qint64> sizes, strides;
        if (!isIntTuple((*items)[2], sizes) || !isIntTuple((*items)[3], strides) || sizes.size() != strides.size())
            return bad(QStringLiteral("a tensor's sizes and strides are not two lists of as many whole numbers"));
        const qint64 elements = (*items)[0].number;
        const qint64 offset = (*items)[1].number;
        if (offset < 0 || offset > elements)
            return bad(QStringLiteral("a tensor starts at element %1 of a storage of %2").arg(offset).arg(elements));
        // The last element the view reaches: offset + sum((size - 1) * stride), none when a size is 0.
        qint64 last = offset;
        bool empty = false;
        for (size_t i = 0; i < sizes.size(); ++i) {
            if (sizes[i] < 0 || strides[i] < 0)
                return bad(QStringLiteral("a tensor has a negative size or stride"));
            empty = empty || sizes[i] == 0;
            qint64 reach = 0;
            if (sizes[i] > 0 && (__builtin_mul_overflow(sizes[i] - 1, strides[i], &reach) ||
                                 __builtin_add_overflow(last, reach, &last)))
                return bad(QStringLiteral("a tensor's sizes and strides overflow"));
        }
        if (!empty && last >= elements)
            return bad(QStringLiteral("a tensor of sizes %1 and strides %2 from element %3 reaches element %4 of a "
                                      "storage of %5: outside its storage")
                           .arg(joined(sizes), joined(strides))
                           .arg(offset)
                           .arg(last)
                           .arg(elements));
        push(Value::Kind::Tensor, elements);
        return true;
    }
    static QString joined(const std::vector<qint64>& numbers)
    {
        QStringList parts;
        for (qint64 n : numbers)
            parts << QString::number(n);
        return u'[' + parts.join(u", ") + u']';
    }

    // BUILD and REDUCE alike, as libtorch treats them: the callable's number under its argument.
    bool call()
    {
        if (!need(2))
            return false;
        Value args = pop();
        const Value callee = pop();
        if (callee.kind != Value::Kind::Int || callee.number < 0 || callee.number >= qint64(m_globals.size()))
            return bad(QStringLiteral("it calls something that is no global of this pickle"));
        const std::vector<Value>* items = args.kind == Value::Kind::Tuple ? args.items.get() : nullptr;
        switch (m_globals[size_t(callee.number)]) {
        case Global::RebuildTensor:
            return rebuildTensor(args);
        case Global::OrderedDict:
            push(Value::Kind::None);
            return true;
        case Global::Device:
            if (!items || items->empty() || (*items)[0].kind != Value::Kind::Text)
                return bad(QStringLiteral("torch.device is called without a device's name"));
            push(Value::Kind::Object);
            return true;
        case Global::RestoreTypeTag:
            if (!items || items->size() < 2 || (*items)[1].kind != Value::Kind::Text)
                return bad(QStringLiteral("a type tag is restored without a type"));
            if ((*items)[1].text.contains("torch.classes"))
                return bad(QStringLiteral("a container is tagged with a TorchBind class; Gleaner runs only "
                                          "TorchScript's own classes"));
            m_stack.push_back((*items)[0]);
            return true;
        case Global::TypedList:
            if (!items || items->empty() || (*items)[0].kind != Value::Kind::List)
                return bad(QStringLiteral("a typed list is built from something that is no list"));
            m_stack.push_back((*items)[0]);
            return true;
        case Global::Complex:
            if (!items || items->size() != 2)
                return bad(QStringLiteral("a complex number is built from other than two parts"));
            push(Value::Kind::Object);
            return true;
        case Global::ScriptClass:
            push(Value::Kind::Object);
            return true;
        }
        return bad(QStringLiteral("unknown global"));
    }

    bool persistentId()
    {
        if (!need(1))
            return false;
        const Value id = pop();
        const std::vector<Value>* items = id.kind == Value::Kind::Tuple ? id.items.get() : nullptr;
        if (!items || items->size() < 5 || (*items)[0].kind != Value::Kind::Text || (*items)[0].text != "storage" ||
            (*items)[1].kind != Value::Kind::Int || (*items)[2].kind != Value::Kind::Text ||
            (*items)[3].kind != Value::Kind::Text || (*items)[4].kind != Value::Kind::Int)
            return bad(QStringLiteral("a persistent id is not ('storage', type, key, device, elements)"));
        Storage storage;
        storage.itemBytes = itemBytesOf((*items)[1].number);
        if (storage.itemBytes == 0)
            return bad(QStringLiteral("a storage has element type %1, which Gleaner does not load")
                           .arg((*items)[1].number));
        storage.elements = (*items)[4].number;
        qint64 bytes = 0;
        if (storage.elements < 0 || __builtin_mul_overflow(storage.elements, qint64(storage.itemBytes), &bytes))
            return bad(QStringLiteral("a storage claims %1 elements").arg(storage.elements));
        storage.key = QString::fromUtf8((*items)[2].text);
        m_storages.append(storage);
        push(Value::Kind::Tensor, storage.elements);
        return true;
    }

    bool step(quint8 op)
    {
        switch (op) {
        case ']': push(Value::Kind::List); return true;      // EMPTY_LIST
        case '}': push(Value::Kind::Dict); return true;      // EMPTY_DICT
        case ')': pushTuple(m_stack.size()); return true;    // EMPTY_TUPLE
        case 'N': push(Value::Kind::None); return true;      // NONE
        case 0x88: push(Value::Kind::Bool, 1); return true;  // NEWTRUE
        case 0x89: push(Value::Kind::Bool, 0); return true;  // NEWFALSE
        case '(': m_marks.push_back(m_stack.size()); return true; // MARK
        case 'K': { quint8 v = 0; if (!little(v)) return false; push(Value::Kind::Int, v); return true; }  // BININT1
        case 'M': { quint16 v = 0; if (!little(v)) return false; push(Value::Kind::Int, v); return true; } // BININT2
        case 'J': { qint32 v = 0; if (!little(v)) return false; push(Value::Kind::Int, v); return true; }  // BININT
        case 0x8a: { // LONG1: libtorch reads only the 8-byte form
            quint8 length = 0;
            qint64 v = 0;
            if (!little(length))
                return false;
            if (length != 8)
                return bad(QStringLiteral("a long integer of %1 bytes; libtorch reads 8").arg(length));
            if (!little(v))
                return false;
            push(Value::Kind::Int, v);
            return true;
        }
        case 'G': { // BINFLOAT
            if (m_in.size() - m_at < 8)
                return bad(QStringLiteral("the pickle ends inside a number"));
            m_at += 8;
            push(Value::Kind::Float);
            return true;
        }
        case 'X': { // BINUNICODE
            quint32 length = 0;
            if (!little(length))
                return false;
            if (qint64(length) > m_in.size() - m_at)
                return bad(QStringLiteral("a string of %1 bytes runs past the pickle's end").arg(length));
            Value text;
            text.kind = Value::Kind::Text;
            text.text = m_in.sliced(m_at, length).toByteArray();
            m_at += length;
            m_stack.push_back(std::move(text));
            return true;
        }
        case 't': { size_t start = 0; if (!popMark(start)) return false; pushTuple(start); return true; } // TUPLE
        case 0x85: case 0x86: case 0x87: { // TUPLE1, TUPLE2, TUPLE3
            const size_t count = size_t(op - 0x84);
            if (!need(count))
                return false;
            pushTuple(m_stack.size() - count);
            return true;
        }
        case 'l': { size_t start = 0; if (!popMark(start)) return false; m_stack.resize(start); push(Value::Kind::List); return true; } // LIST
        case 'e': { // APPENDS: into the list below the mark
            size_t start = 0;
            if (!popMark(start))
                return false;
            if (start == 0 || m_stack[start - 1].kind != Value::Kind::List)
                return bad(QStringLiteral("it appends to something that is no list"));
            m_stack.resize(start);
            return true;
        }
        case 'd': case 'u': { // DICT, SETITEMS: key and value pairs above the mark
            size_t start = 0;
            if (!popMark(start))
                return false;
            if ((m_stack.size() - start) % 2 != 0)
                return bad(QStringLiteral("a dict is given a key without its value"));
            if (op == 'u' && (start == 0 || m_stack[start - 1].kind != Value::Kind::Dict))
                return bad(QStringLiteral("it sets items of something that is no dict"));
            m_stack.resize(start);
            if (op == 'd')
                push(Value::Kind::Dict);
            return true;
        }
        case 's': // SETITEM
            if (!need(3))
                return false;
            if (m_stack[m_stack.size() - 3].kind != Value::Kind::Dict)
                return bad(QStringLiteral("it sets an item of something that is no dict"));
            m_stack.resize(m_stack.size() - 2);
            return true;
        case 'q': { quint8 id = 0; return little(id) && memoPut(id); }     // BINPUT
        case 'r': { quint32 id = 0; return little(id) && memoPut(id); }    // LONG_BINPUT
        case 'h': { quint8 id = 0; return little(id) && memoGet(id); }     // BINGET
        case 'j': { quint32 id = 0; return little(id) && memoGet(id); }    // LONG_BINGET
        case 'c': return global();                                          // GLOBAL
        case 0x81: if (!need(1)) return false; m_stack.pop_back(); return true; // NEWOBJ: its tuple is dropped
        case 'b': case 'R': return call();                                  // BUILD, REDUCE
        case 'Q': return persistentId();                                    // BINPERSID
        default:
            return bad(QStringLiteral("an opcode libtorch's unpickler does not read"));
        }
    }

    QByteArrayView m_in;
    QString m_what;
    qsizetype m_at = 0;
    QString m_problem;
    std::vector<Value> m_stack;
    std::vector<size_t> m_marks;
    std::vector<Value> m_memo;
    std::vector<Global> m_globals;
    QList<Storage> m_storages;
};

} // namespace

Result<QList<Storage>> storages(QByteArrayView pickle, const QString& what)
{
    return Scan(pickle, what).run();
}

} // namespace gleaner::ml::ScriptPickle
