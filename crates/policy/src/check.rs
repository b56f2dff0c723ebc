//! The load-time check of a CEL expression: every attribute it reads exists and is known in the
//! rule's phase, operators get operands of types they take, and the whole is a bool. CEL's Rust
//! implementation has no type checker, so this walks its AST with the attributes' types; what
//! only evaluation can know (a JWT claim, a comprehension's variable) is `dyn` and passes.

use cel::common::ast::{operators as op, EntryExpr, Expr, IdedExpr, LiteralValue, SourceInfo};

use crate::attributes::{attribute, child, Phase, Type};

/// Why an expression cannot load: what, and where in its source (characters from–to).
#[derive(Debug, Clone, PartialEq)]
pub struct CheckError {
    pub message: String,
    pub at: Option<(u32, u32)>,
}

impl std::fmt::Display for CheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.at {
            Some((from, to)) => write!(f, "{} (at characters {from}–{to})", self.message),
            None => write!(f, "{}", self.message),
        }
    }
}

/// Walks one expression.
pub struct Checker<'a> {
    phase: Phase,
    source: &'a SourceInfo,
    /// Comprehension variables in scope, with their types.
    scope: Vec<(String, Type)>,
    /// The attributes read, for evaluation to provide only those.
    pub read: Vec<&'static str>,
}

impl<'a> Checker<'a> {
    pub fn new(phase: Phase, source: &'a SourceInfo) -> Checker<'a> {
        Checker { phase, source, scope: Vec::new(), read: Vec::new() }
    }

    fn error(&self, e: &IdedExpr, message: String) -> CheckError {
        CheckError { message, at: self.source.offset_for(e.id) }
    }

    /// The expression's type, or why it cannot load.
    pub fn infer(&mut self, e: &IdedExpr) -> Result<Type, CheckError> {
        match &e.expr {
            Expr::Literal(literal) => Ok(match literal {
                LiteralValue::Boolean(_) => Type::Bool,
                LiteralValue::Int(_) | LiteralValue::UInt(_) => Type::Int,
                LiteralValue::Double(_) => Type::Double,
                LiteralValue::String(_) => Type::String,
                LiteralValue::Bytes(_) => Type::Dyn,
                LiteralValue::Null => Type::Null,
            }),
            Expr::Ident(name) => self.ident(e, name),
            Expr::Select(s) => {
                let operand = self.infer(&s.operand)?;
                self.select(e, operand, &s.field, s.test)
            }
            Expr::Call(call) => {
                let target = call.target.as_deref().map(|t| self.infer(t)).transpose()?;
                let args = call.args.iter().map(|a| self.infer(a)).collect::<Result<Vec<_>, _>>()?;
                self.call(e, &call.func_name, target, &args)
            }
            Expr::List(list) => {
                for element in &list.elements {
                    self.infer(element)?;
                }
                Ok(Type::List(Box::new(Type::Dyn)))
            }
            Expr::Map(map) => {
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(entry) = &entry.expr {
                        self.infer(&entry.key)?;
                        self.infer(&entry.value)?;
                    }
                }
                Ok(Type::Map(Box::new(Type::Dyn)))
            }
            Expr::Comprehension(c) => {
                let range = self.infer(&c.iter_range)?;
                let element = match range {
                    Type::List(t) => *t,
                    Type::Map(_) => Type::String,
                    _ => Type::Dyn,
                };
                let accumulator = self.infer(&c.accu_init)?;
                let before = self.scope.len();
                self.scope.push((c.iter_var.clone(), element));
                if let Some(second) = &c.iter_var2 {
                    self.scope.push((second.clone(), Type::Dyn));
                }
                self.scope.push((c.accu_var.clone(), accumulator));
                let walked = [&c.loop_cond, &c.loop_step].into_iter().try_for_each(|x| self.infer(x).map(drop));
                let result = walked.and_then(|()| self.infer(&c.result));
                self.scope.truncate(before);
                result
            }
            Expr::Struct(_) | Expr::Unspecified => Err(self.error(e, "message literals are not supported".into())),
        }
    }

    fn ident(&mut self, e: &IdedExpr, name: &str) -> Result<Type, CheckError> {
        if let Some((_, ty)) = self.scope.iter().rev().find(|(n, _)| n == name) {
            return Ok(ty.clone());
        }
        match child("", name) {
            Some(path) => self.attribute_or_prefix(e, path, false),
            None => Err(self.error(e, format!("unknown attribute `{name}`"))),
        }
    }

    fn select(&mut self, e: &IdedExpr, operand: Type, field: &str, test: bool) -> Result<Type, CheckError> {
        let found = match operand {
            Type::Object(prefix) => match child(prefix, field) {
                Some(path) => self.attribute_or_prefix(e, path, test)?,
                None => return Err(self.error(e, format!("unknown attribute `{prefix}.{field}`"))),
            },
            Type::Map(value) => *value,
            Type::Dyn => Type::Dyn,
            other => return Err(self.error(e, format!("`.{field}` of a {}", other.name()))),
        };
        Ok(if test { Type::Bool } else { found })
    }

    /// An attribute (read in this phase or an earlier one), or a prefix of some.
    fn attribute_or_prefix(&mut self, e: &IdedExpr, path: &'static str, test: bool) -> Result<Type, CheckError> {
        let Some(a) = attribute(path) else { return Ok(Type::Object(path)) };
        if a.phase > self.phase {
            let (when, now) = (a.phase.name(), self.phase.name());
            return Err(self.error(e, format!("`{path}` is known only in the {when} phase, after this rule's ({now})")));
        }
        if !self.read.contains(&path) {
            self.read.push(path);
        }
        Ok(if test { Type::Bool } else { (a.ty)() })
    }

    fn call(&self, e: &IdedExpr, name: &str, target: Option<Type>, args: &[Type]) -> Result<Type, CheckError> {
        let all = || target.iter().chain(args.iter());
        let expect = |ty: &Type, want: &[Type], what: &str| -> Result<(), CheckError> {
            match ty {
                Type::Dyn => Ok(()),
                t if want.contains(t) => Ok(()),
                t => Err(self.error(e, format!("{what} takes {}, not {}", names(want), t.name()))),
            }
        };
        let numbers = [Type::Int, Type::Double];
        match name {
            op::LOGICAL_AND | op::LOGICAL_OR | op::LOGICAL_NOT | op::NOT_STRICTLY_FALSE => {
                all().try_for_each(|t| expect(t, &[Type::Bool], "a logical operator"))?;
                Ok(Type::Bool)
            }
            op::EQUALS | op::NOT_EQUALS => {
                self.comparable(e, &args[0], &args[1])?;
                Ok(Type::Bool)
            }
            op::LESS | op::LESS_EQUALS | op::GREATER | op::GREATER_EQUALS => {
                self.comparable(e, &args[0], &args[1])?;
                let ordered = [Type::Int, Type::Double, Type::String];
                args.iter().try_for_each(|t| expect(t, &ordered, "a comparison"))?;
                Ok(Type::Bool)
            }
            op::CONDITIONAL => {
                expect(&args[0], &[Type::Bool], "a condition")?;
                Ok(if args[1] == args[2] { args[1].clone() } else { Type::Dyn })
            }
            op::INDEX | op::OPT_INDEX => self.index(e, &args[0], &args[1]),
            op::IN => match &args[1] {
                Type::List(t) => self.comparable(e, &args[0], t).map(|()| Type::Bool),
                Type::Map(_) => expect(&args[0], &[Type::String], "`in` a map").map(|()| Type::Bool),
                Type::Dyn => Ok(Type::Bool),
                other => Err(self.error(e, format!("`in` takes a list or a map, not {}", other.name()))),
            },
            op::ADD => match (&args[0], &args[1]) {
                (a, b) if a == b && matches!(a, Type::Int | Type::Double | Type::String | Type::List(_)) => {
                    Ok(a.clone())
                }
                (Type::Dyn, _) | (_, Type::Dyn) => Ok(Type::Dyn),
                (a, b) => Err(self.error(e, format!("`+` of {} and {}", a.name(), b.name()))),
            },
            op::SUBSTRACT | op::MULTIPLY | op::DIVIDE | op::MODULO | op::NEGATE => {
                args.iter().try_for_each(|t| expect(t, &numbers, "arithmetic"))?;
                if args.contains(&Type::Int) && args.contains(&Type::Double) {
                    let message = "arithmetic of an int and a double (CEL converts neither: use double(…))";
                    return Err(self.error(e, message.into()));
                }
                Ok(args.iter().find(|t| **t != Type::Dyn).cloned().unwrap_or(Type::Dyn))
            }
            "size" => Ok(Type::Int),
            "startsWith" | "endsWith" | "contains" | "matches" => {
                all().try_for_each(|t| expect(t, &[Type::String], &format!("`{name}`")))?;
                Ok(Type::Bool)
            }
            "getHours" | "getMinutes" | "getSeconds" | "getDayOfWeek" | "getDayOfMonth" | "getDayOfYear"
            | "getMonth" | "getFullYear" => {
                let on = target.as_ref().ok_or_else(|| self.error(e, format!("`{name}` is called on a timestamp")))?;
                expect(on, &[Type::Timestamp], &format!("`{name}`"))?;
                args.iter().try_for_each(|t| expect(t, &[Type::String], &format!("`{name}`'s time zone")))?;
                Ok(Type::Int)
            }
            "timestamp" => Ok(Type::Timestamp),
            "int" => Ok(Type::Int),
            "double" => Ok(Type::Double),
            "string" => Ok(Type::String),
            _ => Err(self.error(e, format!("unknown function `{name}`"))),
        }
    }

    fn index(&self, e: &IdedExpr, operand: &Type, key: &Type) -> Result<Type, CheckError> {
        let wrong = |want: &str| self.error(e, format!("an index of {} is {want}, not {}", operand.name(), key.name()));
        match operand {
            Type::Map(value) if matches!(key, Type::String | Type::Dyn) => Ok((**value).clone()),
            Type::Map(_) => Err(wrong("a string")),
            Type::List(element) if matches!(key, Type::Int | Type::Dyn) => Ok((**element).clone()),
            Type::List(_) => Err(wrong("an int")),
            Type::Dyn => Ok(Type::Dyn),
            other => Err(self.error(e, format!("`[…]` of {}", other.name()))),
        }
    }

    /// Equality and order need operands of one kind (numbers compare with numbers).
    fn comparable(&self, e: &IdedExpr, a: &Type, b: &Type) -> Result<(), CheckError> {
        let number = |t: &Type| matches!(t, Type::Int | Type::Double);
        let same = match (a, b) {
            (Type::Object(p), _) | (_, Type::Object(p)) => {
                return Err(self.error(e, format!("`{p}` is not a value: compare one of its attributes")))
            }
            (Type::Dyn | Type::Null, _) | (_, Type::Dyn | Type::Null) => true,
            (Type::List(_), Type::List(_)) | (Type::Map(_), Type::Map(_)) => true,
            (a, b) => a == b || number(a) && number(b),
        };
        match same {
            true => Ok(()),
            false => Err(self.error(e, format!("compares {} with {}", a.name(), b.name()))),
        }
    }
}

fn names(types: &[Type]) -> String {
    types.iter().map(Type::name).collect::<Vec<_>>().join(" or ")
}
