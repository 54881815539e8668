//! certcheck HOST_FILE [CERT_DIR]: verify CERT_DIR/cert.pem against the CA
//! CERT_DIR/root-ca.pem (default CERT_DIR: ./test) for the expected host
//! name given on the first line of HOST_FILE, the way a TLS client takes
//! its expected server name from a configuration file. An empty host name
//! means "do not check the name". Certificate validity dates are not
//! checked (the test certificates may have expired).
//!
//! Exit status: 0 certificate verified for the host; 1 verification failed;
//! 2 usage, I/O or setup error.
use std::{env, fs, process};

use openssl::stack::Stack;
use openssl::x509::store::X509StoreBuilder;
use openssl::x509::verify::{X509VerifyFlags, X509VerifyParam};
use openssl::x509::{X509StoreContext, X509};

fn fail(msg: String) -> ! {
    eprintln!("certcheck: {}", msg);
    process::exit(2)
}

fn main() {
    let args: Vec<String> = env::args().collect();
    if args.len() < 2 || args.len() > 3 {
        fail("usage: certcheck HOST_FILE [CERT_DIR]".into());
    }
    let dir = args.get(2).map(String::as_str).unwrap_or("test");
    let text = fs::read_to_string(&args[1]).unwrap_or_else(|e| fail(format!("{}: {}", args[1], e)));
    let host: String = text.lines().next().unwrap_or("").trim().to_owned();

    let load = |name: &str| {
        let path = format!("{}/{}", dir, name);
        let pem = fs::read(&path).unwrap_or_else(|e| fail(format!("{}: {}", path, e)));
        X509::from_pem(&pem).unwrap_or_else(|e| fail(format!("{}: {}", path, e)))
    };
    let cert = load("cert.pem");
    let ca = load("root-ca.pem");

    let mut param = X509VerifyParam::new().unwrap_or_else(|e| fail(e.to_string()));
    param
        .set_flags(X509VerifyFlags::NO_CHECK_TIME)
        .unwrap_or_else(|e| fail(e.to_string()));
    param.set_host(&host).unwrap_or_else(|e| fail(format!("set_host({:?}): {}", host, e)));

    let mut store = X509StoreBuilder::new().unwrap_or_else(|e| fail(e.to_string()));
    store.add_cert(ca).unwrap_or_else(|e| fail(e.to_string()));
    store.set_param(&param).unwrap_or_else(|e| fail(e.to_string()));
    let store = store.build();
    let chain = Stack::new().unwrap_or_else(|e| fail(e.to_string()));

    let mut ctx = X509StoreContext::new().unwrap_or_else(|e| fail(e.to_string()));
    let (ok, why) = ctx
        .init(&store, &cert, &chain, |c| {
            let ok = c.verify_cert()?;
            Ok((ok, c.error().error_string().to_owned()))
        })
        .unwrap_or_else(|e| fail(e.to_string()));
    if ok {
        println!("verified for host {:?}", host);
    } else {
        println!("verification failed for host {:?}: {}", host, why);
        process::exit(1);
    }
}
