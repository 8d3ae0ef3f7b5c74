//! Real FDB5 schema files parse unchanged: the copy of Debian's `/etc/fdb/schema` kept as a
//! fixture (ECMWF, Apache-2.0), the installed file when present, and haar's built-in schema.

use haar_core::schema::Matcher;
use haar_core::{Context, Key, Schema, ValueType};

const FIXTURE: &str = include_str!("fixtures/fdb5.schema");

fn check_fdb5_schema(schema: &Schema) {
    assert!(schema.rules.len() > 50, "{} rules", schema.rules.len());
    assert_eq!(schema.type_of("step"), ValueType::Step);
    assert_eq!(schema.type_of("levelist"), ValueType::Double);
    // `icmodel:First3` and `grid-` (with a comment after the minus) are both in it.
    let has = |f: &dyn Fn(&haar_core::schema::Rule) -> bool| {
        schema.rules.iter().any(|db| db.rules.iter().any(f))
    };
    assert!(has(&|i| i
        .types
        .contains(&("icmodel".into(), ValueType::First(3)))));
    assert!(has(&|i| {
        i.predicates
            .iter()
            .any(|p| p.keyword == "grid" && p.matcher == Matcher::Hidden(String::new()))
    }));
}

#[test]
fn fixture_parses() {
    let schema = Schema::parse(FIXTURE).unwrap_or_else(|e| panic!("fixture: {e}"));
    check_fdb5_schema(&schema);
    // FDB5's enfo rule: domain is required there, quantile/number/levelist optional.
    let key = Key::parse(
        "class=od,expver=1,stream=enfo,date=20240101,time=0,domain=g,type=pf,levtype=pl,\
         step=6,number=5,levelist=500,param=130",
    )
    .unwrap();
    let split = schema.split(&key, &Context::at(2024, 1, 1)).unwrap();
    assert_eq!(
        split.to_string(),
        "{class=od,expver=0001,stream=enfo,date=20240101,time=0000,domain=g}{type=pf,levtype=pl}\
         {step=6,quantile=,number=5,levelist=500,param=130}"
    );
}

#[test]
fn installed_schema_parses_when_present() {
    let path = "/etc/fdb/schema";
    let Ok(text) = std::fs::read_to_string(path) else {
        eprintln!("{path} not installed; the fixture copy is tested instead");
        return;
    };
    let schema = Schema::parse(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    check_fdb5_schema(&schema);
}

#[test]
fn builtin_extends_fdb5() {
    let fdb5 = Schema::parse(FIXTURE).unwrap();
    let ours = Schema::builtin();
    // Same rules plus the fallback.
    assert_eq!(ours.rules.len(), fdb5.rules.len() + 1);
    assert_eq!(ours.types, fdb5.types);
    // Without a domain the FDB5 schema refuses an ensemble field; the built-in accepts it.
    let key = Key::parse(
        "class=od,expver=1,stream=enfo,date=20240101,time=0,type=pf,levtype=sfc,step=6,number=5,param=167",
    )
    .unwrap();
    let ctx = Context::at(2024, 1, 1);
    assert!(fdb5.split(&key, &ctx).is_err());
    let split = ours.split(&key, &ctx).unwrap();
    assert_eq!(split.db.get("domain"), Some(""));
}
