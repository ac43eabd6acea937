console.log('working');
